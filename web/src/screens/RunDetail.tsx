import { useApolloClient, useMutation, useQuery } from "@apollo/client/react";
import { useEffect, useRef } from "react";
import { CANCEL_RUN, EVENTS_PAGE, RUN_DETAIL, RUN_TIMELINE } from "../api/documents/runs";
import { describeError } from "../api/errors";
import { ACTIVE_STATUSES } from "../api/types";
import { Link, useLocation } from "../app/router";
import { lastSeq } from "../realtime/timeline";
import { ErrorNote, Json, Loading, StatusBadge } from "../ui/common";
import { compactJson, formatDuration, formatTime, shortId } from "../ui/format";

/** One run: its fields (live on run.updated), its timeline (live on run.event), Cancel run. */
export function RunDetail({ id }: { id: string }) {
  const { params } = useLocation();
  const { data, error, loading } = useQuery(RUN_DETAIL, { variables: { id } });
  const [cancelRun, cancelling] = useMutation(CANCEL_RUN);
  const run = data?.run;

  useEffect(() => {
    document.title = `Run ${shortId(id)} · Outlive`;
  }, [id]);

  if (error && !run) return <ErrorNote error={error} />;
  if (!data && loading) return <Loading />;
  if (!run) {
    return (
      <section>
        <h1>Run not found</h1>
        <p>
          There is no run <code>{id}</code> in this tenant. <Link to="/runs">All runs</Link>
        </p>
      </section>
    );
  }

  const active = ACTIVE_STATUSES.includes(run.status);
  const cancelRequested = run.cancelRequestedAt !== null;

  return (
    <section aria-labelledby="run-heading">
      <p className="crumbs">
        <Link to="/runs">← All runs</Link>
      </p>
      <div className="section-head">
        <h1 id="run-heading">
          Run <span className="mono">{shortId(run.id)}</span> <span className="muted">· {run.agent}</span>
        </h1>
        {active && (
          <button
            type="button"
            className="danger"
            disabled={cancelRequested || cancelling.loading}
            onClick={() => void cancelRun({ variables: { id: run.id } }).catch(() => undefined)}
          >
            Cancel run
          </button>
        )}
      </div>
      {params.get("existing") && active && (
        <p className="note" role="note">
          This agent already had an active run, so here it is: one {run.agent} run at a time.
        </p>
      )}
      {cancelling.error && (
        <p className="note note-error" role="alert">
          {describeError(cancelling.error)}
        </p>
      )}
      {error && <ErrorNote error={error} />}
      <dl className="facts">
        <div>
          <dt>Status</dt>
          <dd>
            <StatusBadge status={run.status} testId="run-status" />
            {cancelRequested && active && <span className="muted small"> cancel requested {formatTime(run.cancelRequestedAt)}</span>}
          </dd>
        </div>
        <div>
          <dt>Attempt</dt>
          <dd>{run.attempt}</dd>
        </div>
        <div>
          <dt>Created</dt>
          <dd title={run.createdAt}>{formatTime(run.createdAt)}</dd>
        </div>
        <div>
          <dt>Started</dt>
          <dd title={run.startedAt ?? undefined}>{formatTime(run.startedAt)}</dd>
        </div>
        <div>
          <dt>Finished</dt>
          <dd title={run.finishedAt ?? undefined}>{formatTime(run.finishedAt)}</dd>
        </div>
        <div>
          <dt>Duration</dt>
          <dd>{formatDuration(run.startedAt, run.finishedAt)}</dd>
        </div>
        <div className="wide">
          <dt>Id</dt>
          <dd className="mono">{run.id}</dd>
        </div>
      </dl>
      {run.error && (
        <div className="note note-error" role="note" aria-label="Error">
          <strong>Error:</strong> {run.error}
        </div>
      )}
      <div className="columns">
        <div>
          <h2>Input</h2>
          <Json value={run.input} label="Input" />
        </div>
        <div>
          <h2>Output</h2>
          {run.output === null ? <p className="muted">{active ? "Not yet." : "None."}</p> : <Json value={run.output} label="Output" />}
        </div>
      </div>
      <Timeline id={run.id} />
    </section>
  );
}

function Timeline({ id }: { id: string }) {
  const client = useApolloClient();
  const { data, error, loading } = useQuery(RUN_TIMELINE, { variables: { id, after: 0 } });
  const events = data?.run?.events ?? [];
  const asked = useRef(-1);

  // A long timeline arrives a page at a time: ask for the next page while the last one was full.
  useEffect(() => {
    const last = lastSeq(data);
    if (loading || events.length === 0 || events.length % EVENTS_PAGE !== 0 || asked.current === last) return;
    asked.current = last;
    void client
      .query({ query: RUN_TIMELINE, variables: { id, after: last }, fetchPolicy: "network-only" })
      .catch(() => undefined);
  }, [client, id, data, events.length, loading]);

  return (
    <section aria-labelledby="timeline-heading">
      <h2 id="timeline-heading">
        Timeline <span className="muted small">({events.length} events)</span>
      </h2>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && events.length === 0 && <p className="muted">Nothing yet.</p>}
      {events.length > 0 && (
        <ol className="timeline" aria-label="Timeline">
          {events.map((e) => (
            <li key={e.seq} data-seq={e.seq} className={`event event-${e.type}`}>
              <span className="event-seq mono">#{e.seq}</span>
              <span className="event-type">{e.type}</span>
              <span className="event-data mono">{compactJson(e.data)}</span>
              <time className="event-at muted" dateTime={e.at} title={e.at}>
                {formatTime(e.at)}
              </time>
            </li>
          ))}
        </ol>
      )}
    </section>
  );
}
