import { describe, expect, it } from "vitest";
import { asCurl, asGraphQL, START_RUN_TEXT } from "./copyAs";
import { checkJson, fieldsOf } from "./schemaForm";

describe("copy as", () => {
  it("GraphQL: the mutation and its variables", () => {
    const text = asGraphQL("demo", { turns: 2 });
    expect(text.startsWith(START_RUN_TEXT)).toBe(true);
    expect(JSON.parse(text.split("# variables\n")[1]!)).toEqual({ input: { agent: "demo", input: { turns: 2 } } });
  });

  it("cURL: quoted for the shell, the token from the environment", () => {
    const text = asCurl("http://127.0.0.1:8000", "demo", { prompt: "it's" });
    expect(text).toContain(`'http://127.0.0.1:8000/graphql'`);
    expect(text).toContain(`"Authorization: Bearer $OUTLIVE_TOKEN"`);
    expect(text).toContain(`it'\\''s`); // a single quote closes, escapes and reopens
    expect(text).not.toMatch(/olv_/);
  });
});

describe("checkJson", () => {
  const fields = fieldsOf({
    type: "object",
    properties: { turns: { type: "integer", minimum: 1, default: 3 }, note: { type: "string" } },
  });

  it("takes an object the form would take", () => {
    expect(checkJson(fields, '{"turns": 2}')).toEqual({ ok: true, values: { turns: "2", note: "" } });
  });

  it("says what is wrong, as the form does", () => {
    expect(checkJson(fields, "{")).toEqual({ ok: false, error: "Not valid JSON." });
    expect(checkJson(fields, "[1]")).toEqual({ ok: false, error: "The input must be a JSON object." });
    expect(checkJson(fields, '{"turnz": 2}')).toEqual({ ok: false, error: "Not in the agent's schema: turnz." });
    expect(checkJson(fields, '{"turns": 0}')).toMatchObject({ ok: false, error: expect.stringContaining("at least 1") });
  });
});
