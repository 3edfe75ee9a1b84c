import type { Field, Values } from "./schemaForm";

interface Props {
  idPrefix: string;
  fields: Field[];
  values: Values;
  errors: Record<string, string>;
  onChange: (name: string, value: string | boolean) => void;
}

/** The inputs for an agent's schema (see schemaForm.ts); every input has its label. */
export function SchemaForm({ idPrefix, fields, values, errors, onChange }: Props) {
  if (fields.length === 0) {
    return <p className="muted">This agent takes no input.</p>;
  }
  return (
    <div className="fields">
      {fields.map((f) => {
        const id = `${idPrefix}-${f.name}`;
        const error = errors[f.name];
        const describedBy = [f.description ? `${id}-hint` : "", error ? `${id}-error` : ""]
          .filter(Boolean)
          .join(" ");
        const common = {
          id,
          name: f.name,
          "aria-invalid": error ? true : undefined,
          "aria-describedby": describedBy || undefined,
          required: f.required,
        };
        const value = values[f.name];
        let input;
        if (f.kind === "boolean") {
          input = (
            <input {...common} type="checkbox" checked={value === true} onChange={(e) => onChange(f.name, e.target.checked)} />
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
          <div key={f.name} className={`field field-${f.kind}`}>
            <label htmlFor={id}>
              {f.label}
              {f.required && <span aria-hidden="true"> *</span>}
            </label>
            {input}
            {f.description && (
              <p id={`${id}-hint`} className="hint">
                {f.description}
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
      })}
    </div>
  );
}
