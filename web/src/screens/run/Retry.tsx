import { useMutation } from "@apollo/client/react";
import { useState } from "react";
import { RETRY_RUN } from "../../api/documents/runs";
import { describeError } from "../../api/errors";
import { navigate } from "../../app/router";
import { retryWord } from "../../ui/attempts";
import type { DetailRun } from "./types";

/**
 * A settled run's actions: "Run again" after a success, "Retry" otherwise (a fresh run, the same
 * input); after a failure or a cancel, "Retry from where it failed" (retryRun reuseSteps: the new
 * run starts with this run's recorded steps); and "… with edited input", which opens the input
 * as JSON, checked before anything is sent. Errors show next to the buttons.
 */
export function RetryActions({ run }: { run: DetailRun }) {
  const [retryRun, retrying] = useMutation(RETRY_RUN);
  const [editing, setEditing] = useState(false);
  const [text, setText] = useState(() => JSON.stringify(run.input, null, 2));
  const [problem, setProblem] = useState<string | null>(null);
  const word = retryWord(run.status);
  const fromFailure = run.status !== "SUCCEEDED";

  const retry = async (variables: { input?: unknown; reuseSteps?: boolean }) => {
    if (retrying.loading) return;
    try {
      const result = await retryRun({ variables: { id: run.id, ...variables } });
      const payload = result.data?.retryRun;
      if (payload) navigate(`/runs/${payload.run.id}${payload.created ? "" : "?existing=1"}`);
    } catch {
      // shown below from `retrying.error`
    }
  };
  const withInput = () => {
    let input: unknown;
    try {
      input = JSON.parse(text);
    } catch (e) {
      setProblem(`The input is not valid JSON (${e instanceof Error ? e.message : String(e)}); nothing was sent.`);
      return;
    }
    setProblem(null);
    void retry({ input });
  };
  const busy = retrying.loading ? true : undefined;
  return (
    <div className="retry-actions">
      <div className="actions">
        <button type="button" className="primary" aria-disabled={busy} onClick={() => void retry({})}>
          {word}
        </button>
        {fromFailure && (
          <button type="button" aria-disabled={busy} onClick={() => void retry({ reuseSteps: true })}>
            Retry from where it failed
          </button>
        )}
        <button type="button" className="quiet" aria-expanded={editing} onClick={() => setEditing((v) => !v)}>
          {word} with edited input…
        </button>
      </div>
      {editing && (
        <div className="field retry-input">
          <label htmlFor="retry-input">Input for the new run (JSON)</label>
          <textarea
            id="retry-input"
            className="mono"
            rows={6}
            spellCheck={false}
            value={text}
            aria-invalid={problem ? true : undefined}
            aria-describedby={problem ? "retry-input-error" : undefined}
            onChange={(e) => setText(e.target.value)}
          />
          {problem && (
            <p className="field-error" id="retry-input-error" role="alert">
              {problem}
            </p>
          )}
          <button type="button" className="primary" aria-disabled={busy} onClick={withInput}>
            {word} with this input
          </button>
        </div>
      )}
      {retrying.error && (
        <p className="note note-error" role="alert">
          {describeError(retrying.error)}
        </p>
      )}
    </div>
  );
}
