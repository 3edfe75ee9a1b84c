import { useQuery } from "@apollo/client/react";
import { useEffect, useState } from "react";
import { AWAITING_INPUT } from "../api/documents/runs";
import type { AwaitingInputQuery } from "../api/generated";
import { Link } from "../app/router";
import { ApprovalActions } from "../ui/Approval";
import { ErrorNote, Loading, useNow, When } from "../ui/common";
import { formatRelative, formatTime, inputPreview, shortId } from "../ui/format";
import { HoldActions } from "../ui/Hold";
import { APPROVAL, describeShown } from "../ui/signal";
import { awaitsPerson, holdOf } from "../ui/waiting";

export const AWAITING_SHOWN = 100;

type WaitingRun = AwaitingInputQuery["runs"]["edges"][number]["node"];

/** What the row says the run waits for: a signal by name, a budget, a pause or a code version. */
function WaitsFor({ run }: { run: WaitingRun }) {
  const hold = holdOf(run);
  if (hold === "budget") return <span>a budget (its next step would pass the limit)</span>;
  if (hold === "pause") return <span>a pause{run.pausedAt ? <> since {formatTime(run.pausedAt)}</> : null}</span>;
  if (hold === "version")
    return (
      <span>
        a fix deployed: its code no longer reaches the steps it recorded (<Link to={`/runs/${run.id}`}>where</Link>)
      </span>
    );
  return (
    <span>
      the signal <code>{run.waitingFor}</code>
    </span>
  );
}

/** The run's context, so nobody decides blind: its key, tags, what the agent shows, its input. */
function Context({ run }: { run: WaitingRun }) {
  const shown = describeShown(run.waitingShow);
  return (
    <div className="inbox-context">
      {run.key && (
        <span>
          <span className="muted small">key </span>
          <span className="mono" data-testid="inbox-key">
            {run.key}
          </span>
        </span>
      )}
      {run.tags.length > 0 && (
        <span className="key-tags" aria-label="Tags">
          {run.tags.map((t) => (
            <span key={t} className="tag">
              {t}
            </span>
          ))}
        </span>
      )}
      {shown && (
        <span data-testid="inbox-show">
          <span className="muted small">asks </span>
          <code>{shown}</code>
        </span>
      )}
      <span className="mono small" data-testid="inbox-input" title="Input">
        {inputPreview(run.input)}
      </span>
    </div>
  );
}

/**
 * The runs WAITING for a person, oldest first: a signal (not a durable sleep), or a hold (a
 * budget, a pause, or a code version that does not reach the run's journal). Each with its
 * context (key, tags, what the agent shows, its input), what it waits for and until when, and
 * what a person can do in place: Approve and Reject for `approval`; Raise once, Raise the limit and Cancel for a budget's hold; Resume and Cancel for a
 * pause, and for a run held on its code version (once a fix is deployed). A row that was just
 * decided stays, with its answer, until the page is left.
 */
export function AwaitingInput() {
  const { data, error, loading } = useQuery(AWAITING_INPUT, {
    variables: { first: AWAITING_SHOWN, status: ["WAITING"] },
  });
  const [decided, setDecided] = useState<Map<string, WaitingRun>>(new Map());
  const now = useNow(30_000);
  useEffect(() => {
    document.title = "Awaiting input · Outlive";
  }, []);
  const listed = (data?.runs.edges ?? []).map((e) => e.node).filter(awaitsPerson);
  const ids = new Set(listed.map((r) => r.id));
  const rows = [...listed, ...[...decided.values()].filter((r) => !ids.has(r.id))];
  const sleeping = (data?.runs.edges.length ?? 0) - listed.length;
  return (
    <section aria-labelledby="awaiting-heading">
      <h1 id="awaiting-heading">Awaiting input</h1>
      <p className="muted">
        Runs parked until a person acts, oldest first. A run waiting for <code>approval</code> can be approved or
        rejected here; any other signal is sent from the run's page. A run held by a budget can go on once past it
        (raise once), or wait for a raised limit; a paused run is resumed here, and so is a run held on its code version
        once a fix is deployed.
      </p>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && rows.length === 0 && (
        <p className="empty">
          Nothing waits for a person.
          {sleeping > 0 && ` ${sleeping} run(s) are in a durable sleep; their timers wake them.`}
        </p>
      )}
      {rows.length > 0 && (
        <div className="table-wrap">
          <table className="table cards-narrow" aria-label="Runs awaiting input">
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Agent</th>
                <th scope="col">Context</th>
                <th scope="col">Waits for</th>
                <th scope="col">Until</th>
                <th scope="col">Decision</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((run) => {
                const still = ids.has(run.id);
                return (
                  <tr key={run.id} data-run-id={run.id}>
                    <td data-label="Run">
                      <Link to={`/runs/${run.id}`} className="mono" aria-label={`Run ${run.id}`}>
                        {shortId(run.id)}
                      </Link>{" "}
                      <span className="muted small">
                        <When iso={run.createdAt} />
                      </span>
                    </td>
                    <td data-label="Agent">{run.agent}</td>
                    <td data-label="Context">
                      <Context run={run} />
                    </td>
                    <td data-label="Waits for">
                      <WaitsFor run={run} />
                    </td>
                    <td data-label="Until">
                      {run.wakeAt ? (
                        <time dateTime={run.wakeAt} title={run.wakeAt}>
                          {formatTime(run.wakeAt)} ({formatRelative(run.wakeAt, now)})
                        </time>
                      ) : (
                        <span className="muted">no timeout</span>
                      )}
                    </td>
                    <td data-label="Decision">
                      {holdOf(run) !== null ? (
                        <HoldActions run={run} withCancel label={`Held run ${shortId(run.id)}`} />
                      ) : run.waitingFor === APPROVAL ? (
                        <ApprovalActions
                          run={run}
                          waiting={still}
                          label={`Approval of run ${shortId(run.id)}`}
                          onSend={() => setDecided((m: Map<string, WaitingRun>) => new Map(m).set(run.id, run))}
                        />
                      ) : (
                        <Link to={`/runs/${run.id}`}>Send {run.waitingFor} on its page</Link>
                      )}
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
          {data?.runs.pageInfo.hasNextPage && (
            <p className="muted small">
              The {AWAITING_SHOWN} oldest; <Link to="/runs?status=WAITING">all waiting runs</Link>.
            </p>
          )}
        </div>
      )}
    </section>
  );
}
