import { useEffect, useState } from "react";
import type { Field, Values } from "./schemaForm";
import { Words } from "./Words";

interface Props {
  idPrefix: string;
  fields: Field[];
  values: Values;
  errors: Record<string, string>;
  onChange: (name: string, value: string | boolean) => void;
}

/**
 * The inputs for an agent's schema (see schemaForm.ts); every input has its label. The optional
 * fields the agent marks advanced are folded under "More options (N)", closed until asked for or
 * until one of them has an error.
 */
export function SchemaForm({ idPrefix, fields, values, errors, onChange }: Props) {
  const main = fields.filter((f) => !f.advanced);
  const more = fields.filter((f) => f.advanced);
  const moreInError = more.some((f) => errors[f.name]);
  const [open, setOpen] = useState(false);
  useEffect(() => {
    if (moreInError) setOpen(true);
  }, [moreInError]);
  if (fields.length === 0) {
    return <p className="muted">This agent takes no input.</p>;
  }
  const draw = (f: Field) => (
    <FieldInput
      key={f.name}
      id={`${idPrefix}-${f.name}`}
      field={f}
      value={values[f.name]}
      error={errors[f.name]}
      onChange={onChange}
    />
  );
  return (
    <div className="fields fields-grid">
      {main.map(draw)}
      {more.length > 0 && (
        <details className="more-options" open={open} onToggle={(e) => setOpen(e.currentTarget.open)}>
          <summary>More options ({more.length})</summary>
          <div className="fields-grid">{more.map(draw)}</div>
        </details>
      )}
    </div>
  );
}

function FieldInput({
  id,
  field: f,
  value,
  error,
  onChange,
}: {
  id: string;
  field: Field;
  value: string | boolean | undefined;
  error: string | undefined;
  onChange: Props["onChange"];
}) {
  const describedBy = [f.description ? `${id}-hint` : "", error ? `${id}-error` : ""].filter(Boolean).join(" ");
  const common = {
    id,
    name: f.name,
    "aria-invalid": error ? true : undefined,
    "aria-describedby": describedBy || undefined,
    required: f.required,
  };
  let input;
  if (f.kind === "boolean") {
    input = (
      <input
        {...common}
        type="checkbox"
        checked={value === true}
        onChange={(e) => onChange(f.name, e.target.checked)}
      />
    );
  } else if (f.kind === "enum") {
    input = (
      <select {...common} value={String(value ?? "")} onChange={(e) => onChange(f.name, e.target.value)}>
        {!f.required && <option value="">(default)</option>}
        {f.options?.map((o) => (
          <option key={o} value={o}>
            {o}
          </option>
        ))}
      </select>
    );
  } else if (f.kind === "json" || (f.kind === "string" && f.multiline)) {
    input = (
      <textarea
        {...common}
        rows={f.kind === "json" ? 4 : 3}
        className={f.kind === "json" ? "mono" : undefined}
        value={String(value ?? "")}
        minLength={f.minLength}
        maxLength={f.maxLength}
        onChange={(e) => onChange(f.name, e.target.value)}
      />
    );
  } else {
    const numeric = f.kind === "integer" || f.kind === "number";
    input = (
      <input
        {...common}
        type={numeric ? "number" : "text"}
        inputMode={f.kind === "integer" ? "numeric" : undefined}
        step={f.kind === "integer" ? 1 : numeric ? "any" : undefined}
        min={f.minimum}
        max={f.maximum}
        minLength={f.minLength}
        maxLength={f.maxLength}
        placeholder={!f.required && f.default == null ? "optional" : undefined}
        value={String(value ?? "")}
        onChange={(e) => onChange(f.name, e.target.value)}
      />
    );
  }
  return (
    <div className={`field field-${f.kind}`}>
      <label htmlFor={id}>
        {f.label}
        {f.required && <span aria-hidden="true"> *</span>}
      </label>
      {input}
      {f.description && (
        <p id={`${id}-hint`} className="hint">
          <Words text={f.description} />
          {f.minimum !== undefined && f.maximum !== undefined && ` (${f.minimum}–${f.maximum})`}
        </p>
      )}
      {error && (
        <p id={`${id}-error`} className="field-error">
          {error}
        </p>
      )}
    </div>
  );
}
