import { useState } from "react";
import { describeError } from "../api/errors";

/**
 * A form's one wrong field at a time: `show(field, why)` marks it (aria-invalid, described by its
 * message) and moves the focus there; `clear()` before sending. `ids` maps each field to its
 * input's id (the message's id is `<id>-error`).
 */
export function useFieldProblems<F extends string>(ids: Record<F, string>) {
  const [problem, setProblem] = useState<{ field: F; error: string } | null>(null);
  const err = (field: F) => (problem?.field === field ? problem.error : null);
  return {
    show(field: F, error: string) {
      setProblem({ field, error });
      document.getElementById(ids[field])?.focus();
    },
    clear() {
      setProblem(null);
    },
    described(field: F) {
      return err(field) ? { "aria-invalid": true as const, "aria-describedby": `${ids[field]}-error` } : {};
    },
    fieldError(field: F) {
      const error = err(field);
      return (
        error && (
          <p id={`${ids[field]}-error`} className="field-error">
            {error}
          </p>
        )
      );
    },
  };
}

/** Under a form: what the server refused (an alert), or what was saved (a status). */
export function FormOutcome({ error, saved }: { error: unknown; saved: string | null }) {
  return (
    <>
      {error ? (
        <p className="note note-error" role="alert">
          {describeError(error)}
        </p>
      ) : null}
      {saved && (
        <p className="note" role="status">
          {saved}
        </p>
      )}
    </>
  );
}
