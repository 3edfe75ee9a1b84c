import { CombinedGraphQLErrors, ServerError, ServerParseError } from "@apollo/client/errors";

/** A one-line message for an error, as a person should read it. */
export function describeError(error: unknown): string {
  if (CombinedGraphQLErrors.is(error)) {
    return error.errors.map((e) => e.message).join("; ") || "The API refused the request.";
  }
  if (ServerError.is(error)) {
    if (error.statusCode === 401) return "The API did not accept the token.";
    return `The API answered HTTP ${error.statusCode}.`;
  }
  if (ServerParseError.is(error)) return "The API answered something that is not JSON.";
  if (error instanceof TypeError) return "Cannot reach the API (is it running?).";
  if (error instanceof Error) return error.message;
  return "Something went wrong.";
}

/** The error codes (contract §3) in a GraphQL error, if any. */
export function errorCodes(error: unknown): string[] {
  if (!CombinedGraphQLErrors.is(error)) return [];
  return error.errors.map((e) => String(e.extensions?.["code"] ?? ""));
}

/**
 * Whether the server does not know the document's fields yet (an older server): the screen says
 * "not available" rather than showing an error. Anything else is a real error.
 */
export function isUnavailable(error: unknown): boolean {
  return (
    CombinedGraphQLErrors.is(error) &&
    error.errors.length > 0 &&
    error.errors.every(
      (e) =>
        e.extensions?.["code"] === "GRAPHQL_VALIDATION_FAILED" &&
        /Cannot query field|Unknown type|Unknown argument/.test(e.message),
    )
  );
}

/** The run named by a RUN_ACTIVE error (`startRun` with `onConflict: REJECT`): the key's active run. */
export function activeRunOf(error: unknown): string | null {
  if (!CombinedGraphQLErrors.is(error)) return null;
  const found = error.errors.find((e) => e.extensions?.["code"] === "RUN_ACTIVE");
  const id = found?.extensions?.["runId"];
  return typeof id === "string" ? id : null;
}
