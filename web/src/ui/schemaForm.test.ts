import { describe, expect, it } from "vitest";
import { fieldsOf, humanize, initialValues, toInput } from "./schemaForm";

// What the `agents` query answers for the built-in agents (pydantic's JSON Schema).
const DEMO = {
  additionalProperties: false,
  properties: {
    turns: { default: 3, description: "how many turns to run", maximum: 1000, minimum: 1, title: "Turns", type: "integer" },
    delayMs: { default: 200, maximum: 600000, minimum: 0, title: "Delayms", type: "integer" },
    failAtTurn: {
      anyOf: [{ minimum: 1, type: "integer" }, { type: "null" }],
      default: null,
      title: "Failatturn",
      "x-advanced": true,
    },
    flakyAttempts: {
      anyOf: [{ minimum: 0, type: "integer" }, { type: "null" }],
      default: null,
      title: "Flakyattempts",
      "x-advanced": true,
    },
  },
  title: "DemoInput",
  type: "object",
};
const LLM = {
  properties: {
    prompt: { maxLength: 20000, minLength: 1, title: "Prompt", type: "string" },
    maxTurns: { default: 1, maximum: 20, minimum: 1, title: "Maxturns", type: "integer" },
  },
  required: ["prompt"],
  type: "object",
};

describe("fieldsOf", () => {
  it("makes one field per property with bounds, defaults and readable labels", () => {
    const fields = fieldsOf(DEMO);
    expect(fields.map((f) => [f.name, f.label, f.kind, f.required])).toEqual([
      ["turns", "Turns", "integer", false],
      ["delayMs", "Delay ms", "integer", false],
      ["failAtTurn", "Fail at turn", "integer", false],
      ["flakyAttempts", "Flaky attempts", "integer", false],
    ]);
    expect(fields[0]).toMatchObject({ minimum: 1, maximum: 1000, default: 3, description: "how many turns to run" });
    expect(fields[2]).toMatchObject({ minimum: 1, default: null });
  });

  it("marks the optional fields the agent calls advanced (x-advanced), never a required one", () => {
    expect(fieldsOf(DEMO).map((f) => f.advanced ?? false)).toEqual([false, false, true, true]);
    const [prompt] = fieldsOf({ properties: { prompt: { type: "string", "x-advanced": true } }, required: ["prompt"] });
    expect(prompt?.advanced).toBeUndefined();
  });

  it("marks required fields and long strings", () => {
    const [prompt] = fieldsOf(LLM);
    expect(prompt).toMatchObject({ name: "prompt", kind: "string", required: true, multiline: true, minLength: 1 });
  });

  it("edits what it cannot draw as JSON, and enums as choices", () => {
    const fields = fieldsOf({
      properties: {
        tags: { type: "array", items: { type: "string" } },
        mode: { enum: ["fast", "slow"], title: "Mode of work" },
        verbose: { type: "boolean", default: true },
      },
    });
    expect(fields.map((f) => f.kind)).toEqual(["json", "enum", "boolean"]);
    expect(fields[1]).toMatchObject({ label: "Mode of work", options: ["fast", "slow"] });
  });

  it("gives nothing for a schema without properties", () => {
    expect(fieldsOf({ type: "object" })).toEqual([]);
    expect(fieldsOf(null)).toEqual([]);
  });
});

describe("toInput", () => {
  it("sends the defaults and leaves empty optional fields out", () => {
    const fields = fieldsOf(DEMO);
    expect(toInput(fields, initialValues(fields))).toEqual({ ok: true, input: { turns: 3, delayMs: 200 } });
  });

  it("parses numbers and checks their bounds", () => {
    const fields = fieldsOf(DEMO);
    const values = { ...initialValues(fields), turns: "12", failAtTurn: "4" };
    expect(toInput(fields, values)).toEqual({ ok: true, input: { turns: 12, delayMs: 200, failAtTurn: 4 } });
    const bad = toInput(fields, { ...values, turns: "0", delayMs: "1.5" });
    expect(bad).toEqual({
      ok: false,
      errors: { turns: "Turns must be at least 1", delayMs: "Delay ms must be a whole number" },
    });
  });

  it("requires what the schema requires", () => {
    const fields = fieldsOf(LLM);
    expect(toInput(fields, initialValues(fields))).toEqual({ ok: false, errors: { prompt: "Prompt is required" } });
    expect(toInput(fields, { prompt: "hello", maxTurns: "" })).toEqual({ ok: true, input: { prompt: "hello" } });
  });

  it("parses JSON fields and booleans", () => {
    const fields = fieldsOf({ properties: { tags: { type: "array" }, verbose: { type: "boolean" } } });
    expect(toInput(fields, { tags: '["a"]', verbose: true })).toEqual({ ok: true, input: { tags: ["a"], verbose: true } });
    expect(toInput(fields, { tags: "[", verbose: false })).toEqual({ ok: false, errors: { tags: "Tags must be valid JSON" } });
  });
});

describe("humanize", () => {
  it("splits camelCase and snake_case", () => {
    expect(humanize("delayMs")).toBe("Delay ms");
    expect(humanize("fail_at_turn")).toBe("Fail at turn");
    expect(humanize("prompt")).toBe("Prompt");
  });
});
