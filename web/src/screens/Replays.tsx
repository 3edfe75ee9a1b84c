import { useLazyQuery, useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useRef, useState } from "react";
import {
  CANCEL_RUN_REPLAY,
  REPLAY_RUNS,
  REPLAY_RUNS_COUNT,
  REPLAYS_SHOWN,
  RUN_REPLAYS,
  type RunReplay,
} from "../api/documents/replays";
import { AGENTS } from "../api/documents/viewer";
import { describeError, isUnavailable } from "../api/errors";
import type { RunStatus } from "../api/types";
import { Link, useLocation } from "../app/router";
import { ErrorNote, Loading, StatusBadge, When } from "../ui/common";
import { shortId } from "../ui/format";

const SETTLED: readonly RunStatus[] = ["FAILED", "CANCELLED", "SUCCEEDED"];

/** `datetime-local` (the person's zone) to ISO 8601 with offset, or null. */
function isoFromLocal(value: string): string | null {
  if (!value) return null;
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? null : date.toISOString();
}

/**
 * Bulk replays: "Replay failed runs…" (a filter, a rate, a limit) and every replay with its live
 * progress. `replay.updated` nudges re-query the list (RunReplays); nothing is read off the socket.
 */
export function Replays() {
  const { data, error, loading } = useQuery(RUN_REPLAYS, { variables: { first: REPLAYS_SHOWN } });
  useEffect(() => {
    document.title = "Replays · Outlive";
  }, []);
  const replays = data?.runReplays ?? [];
  return (
    <section aria-labelledby="replays-heading">
      <h1 id="replays-heading">Replays</h1>
      <p className="muted">
        A replay starts settled runs again with the same input, oldest first, at the pace you set. Each new run links
        back to the one it replays; runs created after the replay began are never part of it. Bulk cancels made from
        the runs list ("Cancel all matching…") are listed here too, with their progress.
      </p>
      <ReplayForm />
      {error && <ErrorNote error={error} what="replays" />}
      {!data && loading && <Loading />}
      {data && replays.length === 0 && <p className="empty">No replays yet.</p>}
      {replays.length > 0 && (
        <ol className="plain-list" aria-label="Replays">
          {replays.map((replay) => (
            <ReplayCard key={replay.id} replay={replay} />
          ))}
        </ol>
      )}
    </section>
  );
}

function ReplayForm() {
  const { params } = useLocation();
  const agents = useQuery(AGENTS).data?.agents ?? [];
  const [statuses, setStatuses] = useState<RunStatus[]>(() => {
    const asked = params.getAll("status").filter((s): s is RunStatus => SETTLED.includes(s as RunStatus));
    return asked.length ? asked : ["FAILED"];
  });
  const [agent, setAgent] = useState(params.get("agent") ?? "");
  const [since, setSince] = useState("");
  const [rate, setRate] = useState("1");
  const [limit, setLimit] = useState("100");
  const [replayRuns, { loading, error }] = useMutation(REPLAY_RUNS, { refetchQueries: ["RunReplays"] });
  const [countRuns, counted] = useLazyQuery(REPLAY_RUNS_COUNT, { fetchPolicy: "network-only" });
  const [asking, setAsking] = useState<number | null>(null); // the count, while it asks
  const [done, setDone] = useState<string | null>(null);
  const formKey = JSON.stringify([statuses, agent, since, rate, limit]);
  useEffect(() => setAsking(null), [formKey]); // a changed form is counted again

  const rateNumber = Number(rate);
  const limitNumber = Number(limit);
  const rateError = !(rateNumber > 0) ? "More than 0 runs per second." : null;
  const limitError = !(Number.isInteger(limitNumber) && limitNumber >= 1) ? "A whole number, at least 1." : null;
  const statusError = statuses.length === 0 ? "Pick at least one status." : null;

  const filter = { status: statuses, agent: agent || null, since: isoFromLocal(since) };
  // First the count (replayRunsCount), then, asked, the replay; it says how many it took.
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (rateError || limitError || statusError) return;
    setDone(null);
    const result = await countRuns({ variables: { filter, limit: limitNumber } }).catch(() => null);
    const count = result?.data?.replayRunsCount;
    if (count === undefined) return; // the error is shown below
    if (count === 0) setDone("No run matches: nothing to replay.");
    else setAsking(count);
  };
  const confirm = async () => {
    setAsking(null);
    try {
      const result = await replayRuns({ variables: { filter, rate: rateNumber, limit: limitNumber } });
      const made = result.data?.replayRuns;
      if (made) setDone(made.total === 0 ? "No run matches: nothing to replay." : `Replaying ${made.total} run(s).`);
    } catch {
      // shown below
    }
  };

  return (
    <form className="card" onSubmit={submit} aria-labelledby="replay-form-heading" noValidate>
      <h2 id="replay-form-heading">Replay failed runs…</h2>
      <fieldset className="checks">
        <legend>Runs that ended</legend>
        {SETTLED.map((s) => (
          <label key={s} className="check">
            <input
              type="checkbox"
              name="replay-status"
              value={s}
              checked={statuses.includes(s)}
              onChange={(e) => setStatuses((cur) => (e.target.checked ? [...cur, s] : cur.filter((x) => x !== s)))}
            />
            <StatusBadge status={s} />
          </label>
        ))}
      </fieldset>
      {statusError && <p className="field-error">{statusError}</p>}
      <div className="filters">
        <div className="field">
          <label htmlFor="replay-agent">Agent</label>
          <select id="replay-agent" value={agent} onChange={(e) => setAgent(e.target.value)}>
            <option value="">Any agent</option>
            {agents.map((a) => (
              <option key={a.name} value={a.name}>
                {a.name}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="replay-since">Created since</label>
          <input id="replay-since" type="datetime-local" value={since} onChange={(e) => setSince(e.target.value)} />
        </div>
        <div className="field">
          <label htmlFor="replay-rate">Rate (runs per second)</label>
          <input
            id="replay-rate"
            type="number"
            min="0.01"
            step="any"
            value={rate}
            aria-invalid={rateError ? true : undefined}
            aria-describedby={rateError ? "replay-rate-error" : undefined}
            onChange={(e) => setRate(e.target.value)}
          />
          {rateError && (
            <p className="field-error" id="replay-rate-error">
              {rateError}
            </p>
          )}
        </div>
        <div className="field">
          <label htmlFor="replay-limit">At most (runs)</label>
          <input
            id="replay-limit"
            type="number"
            min="1"
            step="1"
            value={limit}
            aria-invalid={limitError ? true : undefined}
            aria-describedby={limitError ? "replay-limit-error" : undefined}
            onChange={(e) => setLimit(e.target.value)}
          />
          {limitError && (
            <p className="field-error" id="replay-limit-error">
              {limitError}
            </p>
          )}
        </div>
      </div>
      {(error ?? counted.error) && (
        <p className="note note-error" role="alert">
          {describeError(error ?? counted.error)}
        </p>
      )}
      {asking !== null && <ConfirmReplay count={asking} rate={rateNumber} onYes={confirm} onNo={() => setAsking(null)} />}
      {done && (
        <p className="note" role="status">
          {done}
        </p>
      )}
      <div className="actions">
        <button
          type="submit"
          className="primary"
          disabled={loading || counted.loading || asking !== null || Boolean(rateError || limitError || statusError)}
        >
          Replay runs
        </button>
      </div>
    </form>
  );
}

/** The count a replay will take, and a question: nothing starts until it is answered. */
function ConfirmReplay(props: { count: number; rate: number; onYes: () => void; onNo: () => void }) {
  const { count, rate, onYes, onNo } = props;
  const runs = count === 1 ? "1 run" : `${count} runs`;
  const yes = useRef<HTMLButtonElement>(null);
  useEffect(() => yes.current?.focus(), []); // the form's button is disabled while it asks
  return (
    <div className="note confirm-replay" role="group" aria-labelledby="replay-ask">
      <p id="replay-ask" data-testid="replay-count">
        This replays {runs}, at most {rate} per second. Start it?
      </p>
      <div className="actions">
        <button type="button" className="primary" onClick={onYes} ref={yes}>
          Yes, replay {runs}
        </button>
        <button type="button" onClick={onNo}>
          Not now
        </button>
      </div>
    </div>
  );
}

function describeFilter(replay: RunReplay): string {
  const which = replay.statuses.map((s) => s.toLowerCase()).join(" or ");
  const by = replay.kind === "CANCEL" && replay.requestedBy ? ` · by ${replay.requestedBy}` : "";
  const why = replay.reason ? ` · “${replay.reason}”` : "";
  return `${which} runs${replay.agent ? ` of ${replay.agent}` : ""} · ${replay.rate}/s${by}${why}`;
}

function ReplayCard({ replay }: { replay: RunReplay }) {
  const [cancel, cancelling] = useMutation(CANCEL_RUN_REPLAY);
  const running = replay.status === "RUNNING";
  const percent = replay.total ? Math.round((replay.processed / replay.total) * 100) : 100;
  const what = replay.kind === "CANCEL" ? "Bulk cancel" : "Replay";
  const acted = replay.kind === "CANCEL" ? `${replay.cancelled} cancelled` : `${replay.started} started`;
  return (
    <li className="card" aria-label={`${what} ${shortId(replay.id)}`} data-replay-id={replay.id}>
      <div className="section-head">
        <h2 className="small-heading">
          {what} <span className="mono">{shortId(replay.id)}</span>{" "}
          <StatusBadge status={replay.status} testId="replay-status" />
        </h2>
        {running && (
          <button
            type="button"
            className="danger"
            disabled={cancelling.loading}
            onClick={() => void cancel({ variables: { id: replay.id } }).catch(() => undefined)}
          >
            {replay.kind === "CANCEL" ? "Stop bulk cancel" : "Cancel replay"}
          </button>
        )}
      </div>
      <p className="muted small">
        {describeFilter(replay)}
        {replay.since && (
          <>
            {" "}
            · created since <When iso={replay.since} relative={false} />
          </>
        )}{" "}
        · made <When iso={replay.createdAt} />
      </p>
      <progress
        className="progress"
        max={Math.max(replay.total, 1)}
        value={replay.total ? replay.processed : 1}
        aria-label={`${what} ${shortId(replay.id)} progress`}
        aria-valuetext={`${replay.processed} of ${replay.total}`}
      />
      <p className="small" data-testid="replay-counts">
        <strong>
          {replay.processed} of {replay.total}
        </strong>{" "}
        processed ({percent}%) · {acted} · {replay.skipped} skipped
      </p>
      {running && replay.waitingForRunId && (
        <p className="muted small">
          Waiting for <Link to={`/runs/${replay.waitingForRunId}`}>run {shortId(replay.waitingForRunId)}</Link> to
          settle: one active run per agent.
        </p>
      )}
      {replay.lastError && (
        <p className="note note-error" role="note">
          {replay.lastError}
        </p>
      )}
      {cancelling.error && !isUnavailable(cancelling.error) && (
        <p className="note note-error" role="alert">
          {describeError(cancelling.error)}
        </p>
      )}
    </li>
  );
}
