import { useApolloClient, useQuery } from "@apollo/client/react";
import { Fragment, useEffect, useRef, useState } from "react";
import { RUN_STEPS, STEPS_PAGE } from "../../api/documents/runs";
import { liveTexts } from "../../realtime/output";
import { lastStepSeq } from "../../realtime/timeline";
import { ErrorNote, Loading } from "../../ui/common";
import { formatTime } from "../../ui/format";
import { EVENTS_WINDOW } from "./events";
import { useLiveSteps } from "./liveSteps";
import { LiveStepRow, RecordedOutputRow } from "./StepOutput";

/**
 * A run's durable steps, one row each, in completion order: a step is recorded once, when it
 * completes, whatever attempt ran it (a later attempt replays it from the journal, it does not
 * run it again). A long list arrives a page at a time and draws a window at a time.
 *
 * While the run is live, the step in progress shows what it is writing (`runOutput`) in a row
 * after the last completed step; once it completes, its row shows what it recorded instead.
 */
export function StepsPanel({ id, live = false }: { id: string; live?: boolean }) {
  const client = useApolloClient();
  const { data, error, loading } = useQuery(RUN_STEPS, { variables: { id, after: 0 } });
  const steps = data?.run?.steps ?? [];
  const asked = useRef(-1);
  const [shown, setShown] = useState(EVENTS_WINDOW);
  const last = lastStepSeq(data);
  const { output, results } = useLiveSteps(id, live && data !== undefined, last);
  const texts = liveTexts(output);

  // Pages until one comes back short; until then the count says it is not the whole list.
  const [shortAfter, setShortAfter] = useState<number | null>(null);
  const full = steps.length > 0 && steps.length % STEPS_PAGE === 0;
  const complete = !!data && (!full || shortAfter === last);
  useEffect(() => {
    if (loading || !full || asked.current === last) return;
    asked.current = last;
    const before = steps.length; // the answer is read back merged (the `steps` type policy)
    void client
      .query({ query: RUN_STEPS, variables: { id, after: last }, fetchPolicy: "network-only" })
      .then((result) => {
        if ((result.data?.run?.steps.length ?? 0) - before < STEPS_PAGE) setShortAfter(last);
      })
      .catch(() => {
        asked.current = -1;
      });
  }, [client, id, last, full, loading, steps.length]);

  return (
    <section className="panel" aria-labelledby="steps-heading">
      <h2 id="steps-heading">
        Steps{" "}
        <span className="muted small" data-complete={complete ? "true" : "false"}>
          ({steps.length} completed{complete ? "" : " so far, reading the rest…"})
        </span>
      </h2>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && steps.length === 0 && texts.length === 0 && (
        <p className="muted">
          No durable step completed yet (an agent's steps are its <code>ctx.step</code> calls).
        </p>
      )}
      {(steps.length > 0 || texts.length > 0) && (
        <table className="table steps" aria-label="Steps">
          <thead>
            <tr>
              <th scope="col" className="col-optional">#</th>
              <th scope="col">Step</th>
              <th scope="col">Attempt</th>
              <th scope="col">Completed</th>
            </tr>
          </thead>
          <tbody>
            {steps.slice(0, shown).map((step) => (
              <Fragment key={step.seq}>
                <tr data-seq={step.seq} data-testid="step">
                  <td className="mono col-optional">{step.seq}</td>
                  <td className="mono">
                    {step.name} <span className="muted small" title="occurrence: its calls of this name so far">#{step.occurrence}</span>
                  </td>
                  <td>{step.attempt}</td>
                  <td>
                    <time dateTime={step.completedAt} title={step.completedAt}>
                      {formatTime(step.completedAt)}
                    </time>
                  </td>
                </tr>
                {results.has(step.seq) && <RecordedOutputRow seq={step.seq} result={results.get(step.seq)!} />}
              </Fragment>
            ))}
            {texts.length > 0 && <LiveStepRow seq={last + 1} texts={texts} cursor={output.cursor} />}
          </tbody>
        </table>
      )}
      {steps.length > shown && (
        <p className="actions">
          <span className="muted small">
            Showing {shown} of {steps.length}.
          </span>{" "}
          <button type="button" onClick={() => setShown((n) => n + EVENTS_WINDOW)}>
            Show {Math.min(EVENTS_WINDOW, steps.length - shown)} more
          </button>
        </p>
      )}
    </section>
  );
}
