/**
 * A form from an agent's `inputSchema` (JSON Schema, as pydantic writes it): one field per
 * property. Integers, numbers, strings, booleans and enums get their own inputs with the schema's
 * bounds; `anyOf [T, null]` is an optional T; anything else (objects, arrays) is edited as JSON.
 * The server validates again (BAD_USER_INPUT): the form only saves a round trip. An optional
 * property marked `"x-advanced": true` (pydantic: `json_schema_extra={"x-advanced": True}`) is
 * `advanced`: the form folds it away under "More options".
 */

export type FieldKind = "integer" | "number" | "string" | "boolean" | "enum" | "json";

export interface Field {
  name: string;
  label: string;
  kind: FieldKind;
  required: boolean;
  description?: string;
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  options?: string[];
  multiline?: boolean;
  /** an optional knob the agent marks `x-advanced`: folded away until asked for */
  advanced?: boolean;
}

type Schema = Record<string, unknown>;

const isObject = (v: unknown): v is Schema => typeof v === "object" && v !== null && !Array.isArray(v);

/** "delayMs" → "Delay ms"; "fail_at_turn" → "Fail at turn". */
export function humanize(name: string): string {
  const words = name
    .replace(/_/g, " ")
    .replace(/([a-z0-9])([A-Z])/g, "$1 $2")
    .trim()
    .toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** The non-null branch of `anyOf: [T, {type: null}]`, else the schema itself. */
function unwrapNullable(schema: Schema): { schema: Schema; nullable: boolean } {
  const branches = schema["anyOf"] ?? schema["oneOf"];
  if (Array.isArray(branches)) {
    const rest = branches.filter((b) => !(isObject(b) && b["type"] === "null"));
    if (rest.length === 1 && isObject(rest[0]) && rest.length < branches.length) {
      return { schema: { ...schema, ...rest[0] }, nullable: true };
    }
  }
  const type = schema["type"];
  if (Array.isArray(type) && type.includes("null")) {
    const others = type.filter((t) => t !== "null");
    if (others.length === 1) return { schema: { ...schema, type: others[0] }, nullable: true };
  }
  return { schema, nullable: false };
}

function kindOf(schema: Schema): FieldKind {
  if (Array.isArray(schema["enum"]) && schema["enum"].every((v) => typeof v === "string")) {
    return "enum";
  }
  switch (schema["type"]) {
    case "integer":
      return "integer";
    case "number":
      return "number";
    case "string":
      return "string";
    case "boolean":
      return "boolean";
    default:
      return "json";
  }
}

const num = (v: unknown): number | undefined => (typeof v === "number" ? v : undefined);

export function fieldsOf(inputSchema: unknown): Field[] {
  if (!isObject(inputSchema) || !isObject(inputSchema["properties"])) return [];
  const required = new Set(
    Array.isArray(inputSchema["required"]) ? inputSchema["required"].map(String) : [],
  );
  return Object.entries(inputSchema["properties"]).map(([name, raw]) => {
    const { schema } = unwrapNullable(isObject(raw) ? raw : {});
    const kind = kindOf(schema);
    const title = typeof schema["title"] === "string" ? schema["title"] : "";
    // pydantic's automatic title is the name with its first letter up ("Delayms"): ours reads better
    const label = title && title.toLowerCase() !== name.toLowerCase() ? title : humanize(name);
    const field: Field = { name, label, kind, required: required.has(name) };
    if (typeof schema["description"] === "string") field.description = schema["description"];
    if ("default" in schema) field.default = schema["default"];
    const bounds = {
      minimum: num(schema["minimum"]),
      maximum: num(schema["maximum"]),
      minLength: num(schema["minLength"]),
      maxLength: num(schema["maxLength"]),
    };
    for (const [k, v] of Object.entries(bounds)) if (v !== undefined) Object.assign(field, { [k]: v });
    if (schema["x-advanced"] === true && !field.required) field.advanced = true;
    if (kind === "enum") field.options = (schema["enum"] as string[]).slice();
    if (kind === "string" && (field.maxLength === undefined || field.maxLength > 200)) {
      field.multiline = true;
    }
    return field;
  });
}

export type Values = Record<string, string | boolean>;

/** The form's first values: the schema's defaults, as the inputs hold them. */
export function initialValues(fields: Field[]): Values {
  const values: Values = {};
  for (const f of fields) {
    const d = f.default;
    if (f.kind === "boolean") values[f.name] = d === true;
    else if (d === undefined || d === null) values[f.name] = "";
    else if (f.kind === "json") values[f.name] = JSON.stringify(d, null, 2);
    else values[f.name] = String(d);
  }
  return values;
}

export type Parsed =
  | { ok: true; input: Record<string, unknown> }
  | { ok: false; errors: Record<string, string> };

/**
 * The agent input from the form's values. An empty optional field is left out (the agent's
 * default applies); a required one is an error.
 */
export function toInput(fields: Field[], values: Values): Parsed {
  const input: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  for (const f of fields) {
    const raw = values[f.name];
    if (f.kind === "boolean") {
      input[f.name] = raw === true;
      continue;
    }
    const text = typeof raw === "string" ? raw : "";
    if (text.trim() === "" && f.kind !== "string") {
      if (f.required) errors[f.name] = `${f.label} is required`;
      continue;
    }
    if (f.kind === "string" && text === "") {
      if (f.required) errors[f.name] = `${f.label} is required`;
      continue;
    }
    const error = parseInto(f, text, input);
    if (error) errors[f.name] = error;
  }
  return Object.keys(errors).length ? { ok: false, errors } : { ok: true, input };
}

function parseInto(f: Field, text: string, input: Record<string, unknown>): string | null {
  switch (f.kind) {
    case "integer":
    case "number": {
      const n = Number(text.trim());
      if (!Number.isFinite(n)) return `${f.label} must be a number`;
      if (f.kind === "integer" && !Number.isInteger(n)) return `${f.label} must be a whole number`;
      if (f.minimum !== undefined && n < f.minimum) return `${f.label} must be at least ${f.minimum}`;
      if (f.maximum !== undefined && n > f.maximum) return `${f.label} must be at most ${f.maximum}`;
      input[f.name] = n;
      return null;
    }
    case "string":
      if (f.minLength !== undefined && text.length < f.minLength) {
        return `${f.label} must be at least ${f.minLength} characters`;
      }
      if (f.maxLength !== undefined && text.length > f.maxLength) {
        return `${f.label} must be at most ${f.maxLength} characters`;
      }
      input[f.name] = text;
      return null;
    case "enum":
      if (f.options && !f.options.includes(text)) return `${f.label} must be one of the choices`;
      input[f.name] = text;
      return null;
    case "json":
      try {
        input[f.name] = JSON.parse(text);
        return null;
      } catch {
        return `${f.label} must be valid JSON`;
      }
    case "boolean":
      return null;
  }
}

/**
 * The form's values from an input object (the JSON editor's): each known field as its input holds
 * it. A key the schema does not name, or an input that is not an object, is an error.
 */
export function valuesFromInput(
  fields: Field[],
  input: unknown,
): { ok: true; values: Values } | { ok: false; error: string } {
  if (!isObject(input)) return { ok: false, error: "The input must be a JSON object." };
  const known = new Set(fields.map((f) => f.name));
  const unknown = Object.keys(input).filter((k) => !known.has(k));
  if (unknown.length) return { ok: false, error: `Not in the agent's schema: ${unknown.join(", ")}.` };
  const values: Values = {};
  for (const f of fields) {
    const v = input[f.name];
    if (f.kind === "boolean") values[f.name] = v === true;
    else if (v === undefined || v === null) values[f.name] = "";
    else if (f.kind === "json") values[f.name] = JSON.stringify(v, null, 2);
    else values[f.name] = String(v);
  }
  return { ok: true, values };
}

/** The JSON editor's text checked as the form is: parse, then the same field checks. */
export function checkJson(fields: Field[], text: string): { ok: true; values: Values } | { ok: false; error: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { ok: false, error: "Not valid JSON." };
  }
  const from = valuesFromInput(fields, parsed);
  if (!from.ok) return from;
  const checked = toInput(fields, from.values);
  if (!checked.ok) return { ok: false, error: Object.values(checked.errors).join("; ") };
  return from;
}
