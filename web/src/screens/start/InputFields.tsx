import { useState } from "react";
import { CopyButton } from "../../ui/common";
import { asCurl, asGraphQL } from "../../ui/copyAs";
import { SchemaForm } from "../../ui/SchemaForm";
import { checkJson, type Field, toInput, type Values } from "../../ui/schemaForm";

export interface InputEditor {
  jsonText: string;
  jsonError: string | null;
  /** a change in the form: the JSON follows when the form's values make an input */
  setFromForm: (next: Values) => void;
  /** an edit of the JSON: the form follows when it passes the same checks */
  onJson: (text: string) => void;
}

/**
 * The form is the one state; the JSON editor shows it, and an edit there that passes the same
 * checks updates the form. `clearErrors` drops the errors of the last try once the form is fixed.
 */
export function useInputEditor(
  fields: Field[],
  values: Values,
  setValues: (next: Values) => void,
  clearErrors: () => void,
): InputEditor {
  const [jsonText, setJsonText] = useState(() => {
    const parsed = toInput(fields, values);
    return JSON.stringify(parsed.ok ? parsed.input : {}, null, 2);
  });
  const [jsonError, setJsonError] = useState<string | null>(null);
  const setFromForm = (next: Values) => {
    setValues(next);
    const parsed = toInput(fields, next);
    if (parsed.ok) {
      setJsonText(JSON.stringify(parsed.input, null, 2));
      setJsonError(null);
      clearErrors();
    }
  };
  const onJson = (text: string) => {
    setJsonText(text);
    const checked = checkJson(fields, text);
    if (checked.ok) {
      setValues(checked.values);
      clearErrors();
      setJsonError(null);
    } else {
      setJsonError(checked.error);
    }
  };
  return { jsonText, jsonError, setFromForm, onJson };
}

/** The agent's input: its schema's form beside the same input as JSON, and Copy as GraphQL / cURL. */
export function InputFields({
  agent,
  fields,
  values,
  errors,
  editor,
}: {
  agent: string;
  fields: Field[];
  values: Values;
  errors: Record<string, string>;
  editor: InputEditor;
}) {
  const current = toInput(fields, values);
  const input = current.ok ? current.input : null;
  const { jsonText, jsonError } = editor;
  return (
    <div className="columns">
      <fieldset>
        <legend>Input</legend>
        <SchemaForm
          idPrefix="input"
          fields={fields}
          values={values}
          errors={errors}
          onChange={(name, value) => editor.setFromForm({ ...values, [name]: value })}
        />
      </fieldset>
      <div className="field">
        <label htmlFor="input-json">Input as JSON</label>
        <textarea
          id="input-json"
          className="mono json-editor"
          rows={10}
          spellCheck={false}
          value={jsonText}
          aria-invalid={jsonError ? true : undefined}
          aria-describedby={jsonError ? "input-json-error" : "input-json-hint"}
          onChange={(e) => editor.onJson(e.target.value)}
        />
        {jsonError ? (
          <p className="field-error" id="input-json-error" role="alert">
            {jsonError}
          </p>
        ) : (
          <p className="hint" id="input-json-hint">
            Checked against the agent's schema as you type; the form follows.
          </p>
        )}
        {input && (
          <div className="actions">
            <CopyButton value={asGraphQL(agent, input)} label="Copy as GraphQL" text="Copy as GraphQL" />
            <CopyButton value={asCurl(window.location.origin, agent, input)} label="Copy as cURL" text="Copy as cURL" />
          </div>
        )}
      </div>
    </div>
  );
}
