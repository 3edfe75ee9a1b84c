import { useQuery } from "@apollo/client/react";
import { useEffect, useState } from "react";
import { AWAITING_INPUT } from "../api/documents/runs";
import type { AwaitingInputQuery } from "../api/generated";
import { Link } from "../app/router";
import { ApprovalActions } from "../ui/Approval";
import { ErrorNote, Loading, useNow, When } from "../ui/common";
import { formatRelative, formatTime, shortId } from "../ui/format";
import { APPROVAL } from "../ui/signal";

export const AWAITING_SHOWN = 100;

type WaitingRun = AwaitingInputQuery["runs"]["edges"][number]["node"];

/**
 * The runs WAITING for a person (a signal, not a durable sleep), oldest first: what each waits
 * for and until when, with Approve and Reject in place for `approval`. A row that was just
 * decided stays, with its answer, until the page is left (the list no longer has the run).
 */
export function AwaitingInput() {
  const { data, error, loading } = useQuery(AWAITING_INPUT, { variables: { first: AWAITING_SHOWN, status: ["WAITING"] } });
  const [decided, setDecided] = useState<Map<string, WaitingRun>>(new Map());
  const now = useNow(30_000);
  useEffect(() => {
    document.title = "Awaiting input · Outlive";
  }, []);
  const listed = (data?.runs.edges ?? []).map((e) => e.node).filter((run) => run.waitingFor !== null);
  const ids = new Set(listed.map((r) => r.id));
  const rows = [...listed, ...[...decided.values()].filter((r) => !ids.has(r.id))];
  const sleeping = (data?.runs.edges.length ?? 0) - listed.length;
  return (
    <section aria-labelledby="awaiting-heading">
      <h1 id="awaiting-heading">Awaiting input</h1>
      <p className="muted">
        Runs parked until a signal arrives, oldest first. A run waiting for <code>approval</code> can be approved or
        rejected here; any other signal is sent from the run's page.
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
                    <td data-label="Waits for">
                      <code>{run.waitingFor}</code>
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
                      {run.waitingFor === APPROVAL ? (
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

