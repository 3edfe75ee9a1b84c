import { useQuery } from "@apollo/client/react";
import { useEffect } from "react";
import { QUEUE } from "../api/documents/runs";
import { Link } from "../app/router";
import { ErrorNote, Loading, When } from "../ui/common";
import { shortId } from "../ui/format";

export const QUEUE_SHOWN = 50;

/** The runs not yet handed to a worker, oldest wait last (newest first), and why each waits. */
export function Queue() {
  const { data, error, loading } = useQuery(QUEUE, { variables: { first: QUEUE_SHOWN, status: ["QUEUED"] } });
  useEffect(() => {
    document.title = "Queue · Outlive";
  }, []);
  const edges = data?.runs.edges ?? [];
  return (
    <section aria-labelledby="queue-heading">
      <h1 id="queue-heading">Queue</h1>
      <p className="muted">
        Runs waiting for a worker. A run waits for a slot when its tenant is at its cap of running runs; the
        reason says where it is in line.
      </p>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && edges.length === 0 && <p className="empty">Nothing is waiting.</p>}
      {edges.length > 0 && (
        <div className="table-wrap">
          <table className="table" aria-label="Queued runs">
            <thead>
              <tr>
                <th scope="col">Run</th>
                <th scope="col">Agent</th>
                <th scope="col">Queued</th>
                <th scope="col">Why it waits</th>
              </tr>
            </thead>
            <tbody>
              {edges.map(({ node: run }) => (
                <tr key={run.id} data-run-id={run.id}>
                  <td>
                    <Link to={`/runs/${run.id}`} className="mono" aria-label={`Run ${run.id}`}>
                      {shortId(run.id)}
                    </Link>
                  </td>
                  <td>{run.agent}</td>
                  <td>
                    <When iso={run.createdAt} />
                  </td>
                  <td>{run.waitingReason ?? <span className="muted">waiting for a worker to claim it</span>}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {data?.runs.pageInfo.hasNextPage && (
            <p className="muted small">
              The {QUEUE_SHOWN} newest; <Link to="/runs?status=QUEUED">all queued runs</Link>.
            </p>
          )}
        </div>
      )}
    </section>
  );
}
