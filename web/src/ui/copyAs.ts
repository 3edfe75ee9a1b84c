/**
 * "Copy as GraphQL" and "Copy as cURL" for a startRun: the same request the form sends. The token
 * is never written into the text: cURL reads it from $OUTLIVE_TOKEN.
 */

export const START_RUN_TEXT =
  "mutation StartRun($input: StartRunInput!) { startRun(input: $input) { created run { id status } } }";

export function asGraphQL(agent: string, input: unknown): string {
  const variables = JSON.stringify({ input: { agent, input } }, null, 2);
  return `${START_RUN_TEXT}\n\n# variables\n${variables}\n`;
}

/** A POSIX shell single-quoted word. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

export function asCurl(origin: string, agent: string, input: unknown): string {
  const body = JSON.stringify({ query: START_RUN_TEXT, variables: { input: { agent, input } } });
  return [
    `curl -sS ${shellQuote(`${origin}/graphql`)}`,
    `  -H "Authorization: Bearer $OUTLIVE_TOKEN"`,
    `  -H 'Content-Type: application/json'`,
    `  --data ${shellQuote(body)}`,
  ].join(" \\\n");
}
