import { useLazyQuery, useMutation, useQuery } from "@apollo/client/react";
import { useEffect, useRef, useState } from "react";
import {
  CANCEL_RUN_REPLAY,
  CANCEL_RUNS,
  CANCEL_RUNS_COUNT,
  REPLAY_RUNS,
  REPLAY_RUNS_COUNT,
  REPLAYS_SHOWN,
  RUN_REPLAYS,
} from "../../api/documents/replays";
import { describeError } from "../../api/errors";
import type { RunStatus } from "../../api/types";
import { Link } from "../../app/router";
import { StatusBadge } from "../../ui/common";
import { shortId } from "../../ui/format";
import type { RunFilters } from "../runFilters";
import {
  BY_FILTER,
  BY_FILTER_LIMIT,
  BY_FILTER_REPLAY_RATE,
  type FilterAction,
  filterFor,
  progressText,
} from "./byFilter";

interface Asking {
  action: FilterAction;
  count: number;
  statuses: RunStatus[];
}

/**
 * "Cancel all matching…" and "Replay failed matching…": act on every run the list's filters match,
 * not only the ticked rows of one page. The server counts first (cancelRunsCount /
 * replayRunsCount), the person is asked, then the server works through them in the background
 * (cancelRuns / replayRuns) while this shows its progress, moved on by `replay.updated` nudges
 * (RunReplays is asked again), with Stop and a link to the Replays page, which lists it too.
 */
export function ActOnMatching({ filters }: { filters: RunFilters }) {
  const [asking, setAsking] = useState<Asking | null>(null);
  const [said, setSaid] = useState<string | null>(null);
  const [reason, setReason] = useState("");
  const [madeId, setMadeId] = useState<string | null>(null);
  const [countCancel, cancelCount] = useLazyQuery(CANCEL_RUNS_COUNT, { fetchPolicy: "network-only" });
  const [countReplay, replayCount] = useLazyQuery(REPLAY_RUNS_COUNT, { fetchPolicy: "network-only" });
  const [cancelRuns, cancelling] = useMutation(CANCEL_RUNS, { refetchQueries: ["RunReplays"] });
  const [replayRuns, replaying] = useMutation(REPLAY_RUNS, { refetchQueries: ["RunReplays"] });
  const question = useRef<HTMLDivElement>(null);
  const filterKey = JSON.stringify(filters);
  useEffect(() => {
    setAsking(null); // other filters: counted again when asked
    setSaid(null);
  }, [filterKey]);
  useEffect(() => {
    if (asking) question.current?.focus();
  }, [asking]);

  const count = async (action: FilterAction) => {
    const filter = filterFor(action, filters);
    if (!filter?.status) return;
    setSaid(null);
    const variables = { filter, limit: BY_FILTER_LIMIT };
    const result = await (action === "cancel" ? countCancel({ variables }) : countReplay({ variables })).catch(() => null);
    const data = result?.data;
    const n = data && ("cancelRunsCount" in data ? data.cancelRunsCount : data.replayRunsCount);
    if (typeof n !== "number") return; // the error is shown below
    if (n === 0) setSaid(BY_FILTER[action].none);
    else setAsking({ action, count: n, statuses: filter.status });
  };
  const go = async ({ action }: Asking) => {
    const filter = filterFor(action, filters);
    setAsking(null);
    try {
      const made =
        action === "cancel"
          ? (await cancelRuns({ variables: { filter, reason: reason.trim() || null, limit: BY_FILTER_LIMIT } })).data
              ?.cancelRuns
          : (await replayRuns({ variables: { filter, rate: BY_FILTER_REPLAY_RATE, limit: BY_FILTER_LIMIT } })).data
              ?.replayRuns;
      if (made) setMadeId(made.id);
    } catch {
      // shown below
    }
  };

  const error = cancelCount.error ?? replayCount.error ?? cancelling.error ?? replaying.error;
  const offered = (Object.keys(BY_FILTER) as FilterAction[]).filter((a) => filterFor(a, filters) !== null);
  const busy = cancelCount.loading || replayCount.loading || cancelling.loading || replaying.loading;
  return (
    <div className="bulk-bar by-filter" role="region" aria-label="Every matching run">
      <div className="bulk-actions">
        <span className="muted">Every run these filters match, on every page:</span>
        {offered.map((action) => (
          <button
            key={action}
            type="button"
            aria-disabled={busy || asking !== null ? true : undefined}
            onClick={() => {
              if (!busy && asking === null) void count(action);
            }}
          >
            {BY_FILTER[action].button}
          </button>
        ))}
      </div>
      {asking && (
        <div className="bulk-ask" ref={question} tabIndex={-1} data-testid="by-filter-ask" aria-live="polite">
          <p>{BY_FILTER[asking.action].ask(asking.count, asking.statuses)}</p>
          {asking.action === "cancel" && (
            <div className="field">
              <label htmlFor="by-filter-reason">Reason (optional, on each run's timeline)</label>
              <input
                id="by-filter-reason"
                maxLength={500}
                value={reason}
                placeholder="bad deploy"
                onChange={(e) => setReason(e.target.value)}
              />
            </div>
          )}
          <p>
            <button type="button" className="primary" onClick={() => void go(asking)}>
              {BY_FILTER[asking.action].go(asking.count)}
            </button>{" "}
            <button type="button" onClick={() => setAsking(null)}>
              Not now
            </button>
          </p>
        </div>
      )}
      {said && (
        <p className="muted" role="status">
          {said}
        </p>
      )}
      {error && (
        <p className="note note-error" role="alert">
          {describeError(error)}
        </p>
      )}
      {madeId && <MatchingProgress id={madeId} />}
    </div>
  );
}

/** A bulk action's live progress: the Replays screen's list, asked again on each nudge. */
function MatchingProgress({ id }: { id: string }) {
  const { data } = useQuery(RUN_REPLAYS, { variables: { first: REPLAYS_SHOWN } });
  const [stop, stopping] = useMutation(CANCEL_RUN_REPLAY);
  const made = data?.runReplays.find((r) => r.id === id);
  if (!made) return null;
  const what = made.kind === "CANCEL" ? "Bulk cancel" : "Replay";
  const words = made.kind === "CANCEL" ? BY_FILTER.cancel : BY_FILTER.replay;
  const running = made.status === "RUNNING";
  return (
    <div className="by-filter-progress" data-testid="by-filter-progress" role="status">
      <p>
        {running ? `${words.doing}…` : `${what}:`} <StatusBadge status={made.status} testId="by-filter-status" /> ·{" "}
        <Link to="/replays">
          {what} {shortId(made.id)} on the Replays page
        </Link>
      </p>
      <progress
        className="progress"
        max={Math.max(made.total, 1)}
        value={made.total ? made.processed : 1}
        aria-label={`${what} ${shortId(made.id)} progress`}
        aria-valuetext={`${made.processed} of ${made.total}`}
      />
      <p className="small" data-testid="by-filter-counts">
        {progressText(made)}
        {running && (
          <>
            {" "}
            <button
              type="button"
              className="danger"
              disabled={stopping.loading}
              onClick={() => void stop({ variables: { id: made.id } }).catch(() => undefined)}
            >
              Stop
            </button>
          </>
        )}
      </p>
      {stopping.error && (
        <p className="note note-error" role="alert">
          {describeError(stopping.error)}
        </p>
      )}
    </div>
  );
}
