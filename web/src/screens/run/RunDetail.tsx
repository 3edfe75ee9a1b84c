import { useMutation, useQuery } from "@apollo/client/react";
import { type ReactNode, useEffect, useState } from "react";
import { CANCEL_RUN, RUN_DETAIL, RUNS_BY_ID_PREFIX, RUN_WHY } from "../../api/documents/runs";
import { describeError } from "../../api/errors";
import { ACTIVE_STATUSES } from "../../api/types";
import { Link, navigate, useLocation } from "../../app/router";
import { CopyButton, ErrorNote, Loading, StatusBadge, useNow, When } from "../../ui/common";
import { formatDuration, formatTime, shortId } from "../../ui/format";
import { attemptLabel, type AttemptCount, countAttempts } from "../../ui/attempts";
import { HoldActions } from "../../ui/Hold";
import { buildWaterfall, type TimelineEvent, type Waterfall } from "../../ui/waterfall";
import { Timeline } from "./Events";
import { KeyFacts } from "./KeyFacts";
import { Overview } from "./Overview";
import { RetryActions } from "./Retry";
import { StepsPanel } from "./Steps";
import { RUN_TABS, type RunTab, tabHref, tabOf } from "./tabs";
import { Tabs } from "./Tabs";
import { childTotal, hasTree } from "./tree";
import { TreePanel, useRunTree } from "./Tree";
import type { DetailRun } from "./types";
import { WaterfallPanel } from "./Waterfall";
import { useWholeTimeline } from "./wholeTimeline";

/**
 * One run: its heading, facts and actions, then a tab each for the overview (why, signal, input,
 * output), its steps, its waterfall, its events and (for a child or a parent) its tree. Its fields
 * are live on run.updated, its timeline on run.event.
 */
export function RunDetail({ id }: { id: string }) {
  return FULL_ID.test(id) ? <RunById id={id} /> : <RunByPrefix prefix={id} />;
}

const FULL_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The page of a run that could not be shown, with a heading and a way back. */
function NoRun({ title, children }: { title: string; children: ReactNode }) {
  useEffect(() => {
    document.title = `${title} · Outlive`;
  }, [title]);
  return (
    <section aria-labelledby="norun-heading">
      <h1 id="norun-heading">{title}</h1>
      {children}
      <p>
        <Link to="/runs">← All runs</Link>
      </p>
    </section>
  );
}

/** `/runs/<short id>`: one match opens it (the address becomes its full id), several are listed. */
function RunByPrefix({ prefix }: { prefix: string }) {
  const { data, error, loading } = useQuery(RUNS_BY_ID_PREFIX, { variables: { prefix } });
  const found = data?.runsByIdPrefix ?? [];
  const only = found.length === 1 ? found[0]!.id : null;
  useEffect(() => {
    if (only) navigate(`/runs/${only}`, { replace: true });
  }, [only]);
  if (error) {
    return (
      <NoRun title="Run not found">
        <p className="note note-error" role="alert">
          {describeError(error)}
        </p>
      </NoRun>
    );
  }
  if (!data && loading) return <Loading />;
  if (only) return <Loading />;
  if (found.length === 0) {
    return (
      <NoRun title="Run not found">
        <p>
          No run in this tenant has an id that starts with <code>{prefix}</code>.
        </p>
      </NoRun>
    );
  }
  return (
    <NoRun title={`Runs starting with ${prefix}`}>
      <p>Several runs have an id that starts with that; pick one:</p>
      <ul>
        {found.map((r) => (
          <li key={r.id}>
            <Link to={`/runs/${r.id}`} className="mono">
              {r.id}
            </Link>{" "}
            <span className="muted">
              {r.agent} · <StatusBadge status={r.status} /> · <When iso={r.createdAt} />
            </span>
          </li>
        ))}
      </ul>
    </NoRun>
  );
}

function RunById({ id }: { id: string }) {
  const { data, error, loading } = useQuery(RUN_DETAIL, { variables: { id } });
  const why = useQuery(RUN_WHY, { variables: { id } });
  const refetchWhy = why.refetch;
  const run = data?.run;

  useEffect(() => {
    document.title = `Run ${shortId(id)} · Outlive`;
  }, [id]);
  // Heartbeats extend the lease without a nudge (contract §5): when the lease on screen runs
  // out, ask for the run again, so the page never says "ran out" of a lease that was extended.
  const leaseExpiresAt = run?.status === "RUNNING" ? (why.data?.run?.leaseExpiresAt ?? null) : null;
  useEffect(() => {
    if (!leaseExpiresAt) return;
    const wait = Math.max(new Date(leaseExpiresAt).getTime() - Date.now(), 0) + 500;
    const timer = setTimeout(() => void refetchWhy().catch(() => undefined), Math.min(wait, 2 ** 31 - 1));
    return () => clearTimeout(timer);
  }, [leaseExpiresAt, refetchWhy]);

  if (error && !run) {
    return (
      <NoRun title="This run cannot be shown">
        <ErrorNote error={error} />
      </NoRun>
    );
  }
  if (!data && loading) return <Loading />;
  if (!run) {
    return (
      <NoRun title="Run not found">
        <p>
          There is no run <code>{id}</code> in this tenant.
        </p>
      </NoRun>
    );
  }
  return <RunBody run={{ ...run, ...(why.data?.run ?? {}) }} error={error} />;
}

/** The run's page once it is known: its timeline (and so its waterfall) is read once, here. */
function RunBody({ run, error }: { run: DetailRun; error: unknown }) {
  const { events, complete } = useWholeTimeline(run.id);
  const now = useNow(ACTIVE_STATUSES.includes(run.status) ? 1000 : 30_000); // a live band grows
  // Drawn from the whole timeline only: a partial one would state a false picture as whole.
  const waterfall = complete ? buildWaterfall(events, run, now) : null;
  return (
    <section aria-labelledby="run-heading">
      <p className="crumbs">
        <Link to="/runs">← All runs</Link>
      </p>
      <RunHead run={run} />
      {error ? <ErrorNote error={error} /> : null}
      <RunFacts run={run} count={waterfall ? countAttempts(waterfall, run.retriesLeft) : null} />
      {run.error && (
        <div className="note note-error" role="note" aria-label="Error">
          <strong>Error:</strong> {run.error}
        </div>
      )}
      <RunTabs run={run} events={events} waterfall={waterfall} complete={complete} now={now} />
    </section>
  );
}

/** The heading and the run's one action: Cancel run while active, Retry once settled. */
function RunHead({ run }: { run: DetailRun }) {
  const { params } = useLocation();
  const [cancelRun, cancelling] = useMutation(CANCEL_RUN);
  const [confirming, setConfirming] = useState(false);
  const [reason, setReason] = useState("");
  const active = ACTIVE_STATUSES.includes(run.status);
  return (
    <>
      <div className="section-head">
        <h1 id="run-heading">
          Run <span className="mono">{shortId(run.id)}</span> <span className="muted">· {run.agent}</span>
        </h1>
        <div className="toolbar">
          {active && !confirming && <HoldActions run={run} label="Pause or resume" />}
          {active ? (
            confirming ? (
              <span role="group" aria-label="Cancel this run?" className="confirm">
                <span className="small">Cancel this run? It stops before its next turn.</span>
                <label className="small cancel-reason">
                  Reason (optional){" "}
                  <input
                    value={reason}
                    maxLength={500}
                    placeholder="recorded on its timeline"
                    onChange={(e) => setReason(e.target.value)}
                  />
                </label>
                <button
                  type="button"
                  className="danger"
                  autoFocus
                  aria-disabled={cancelling.loading ? true : undefined}
                  onClick={() => {
                    if (cancelling.loading) return;
                    void cancelRun({ variables: { id: run.id, reason: reason.trim() || null } })
                      .then(() => setConfirming(false))
                      .catch(() => undefined);
                  }}
                >
                  Yes, cancel it
                </button>
                <button type="button" className="quiet" onClick={() => setConfirming(false)}>
                  Keep it running
                </button>
              </span>
            ) : (
              <button
                type="button"
                className="danger"
                disabled={run.cancelRequestedAt !== null}
                onClick={() => setConfirming(true)}
              >
                Cancel run
              </button>
            )
          ) : (
            <RetryActions run={run} />
          )}
        </div>
      </div>
      {params.get("existing") && active && <ExistingNote run={run} signalled={params.get("existing") === "signal"} />}
      {cancelling.error && (
        <p className="note note-error" role="alert">
          {describeError(cancelling.error)}
        </p>
      )}
    </>
  );
}

/** Why Start run opened this run rather than a new one (startRun answered `created: false`). */
function ExistingNote({ run, signalled }: { run: DetailRun; signalled: boolean }) {
  const holder = run.key ? `The key ${run.key} already had an active run` : "This agent already had an active run";
  return (
    <p className="note" role="note">
      {signalled
        ? `${holder}: your input was sent to it as the signal "input".`
        : run.key
          ? `${holder}, so here it is: one run of a key at a time.`
          : `${holder}, so here it is: one ${run.agent} run at a time.`}
    </p>
  );
}

function RunFacts({ run, count }: { run: DetailRun; count: AttemptCount | null }) {
  const active = ACTIVE_STATUSES.includes(run.status);
  return (
    <dl className="facts">
      <div>
        <dt>Status</dt>
        <dd aria-live="polite">
          <StatusBadge status={run.status} testId="run-status" />
          {run.cancelRequestedAt !== null && active && (
            <span className="muted small fact-note"> cancel requested {formatTime(run.cancelRequestedAt)}</span>
          )}
        </dd>
      </div>
      <div>
        <dt>Attempt</dt>
        <dd data-testid="run-attempt" title={`${run.attempt} claim(s) by a worker in all`}>
          {count ? attemptLabel(count) : <span className="muted">reading the timeline…</span>}
        </dd>
      </div>
      <div>
        <dt>Created</dt>
        <dd>
          <When iso={run.createdAt} />
        </dd>
      </div>
      <div>
        <dt>Started</dt>
        <dd>
          <When iso={run.startedAt} />
        </dd>
      </div>
      <div>
        <dt>Finished</dt>
        <dd>
          <When iso={run.finishedAt} />
        </dd>
      </div>
      <div>
        <dt>Duration</dt>
        <dd>{formatDuration(run.startedAt, run.finishedAt)}</dd>
      </div>
      <KeyFacts run={run} />
      <div className="wide">
        <dt>Id</dt>
        <dd>
          <span className="mono">{run.id}</span> <CopyButton value={run.id} label="Copy run id" />
        </dd>
      </div>
    </dl>
  );
}

/** The tabs under the facts; only the open one renders (a 1,000-step run draws one list at a time). */
function RunTabs({
  run,
  events,
  waterfall,
  complete,
  now,
}: {
  run: DetailRun;
  events: readonly TimelineEvent[];
  waterfall: Waterfall | null;
  complete: boolean;
  now: number;
}) {
  const { path, params } = useLocation();
  const tab: RunTab = tabOf(params);
  const tree = useRunTree(run.id);
  const children = tree.tree ? childTotal(tree.tree.childCounts) : 0;
  const shown = RUN_TABS.filter((t) => t.id !== "tree" || tab === "tree" || hasTree(tree.tree));
  const items = shown.map((t) => ({
    id: t.id,
    label: t.label,
    href: tabHref(path, params, t.id),
    count: t.id === "events" ? (complete ? events.length : `${events.length}+`) : t.id === "tree" ? children || null : null,
  }));
  return (
    <>
      <Tabs label="Run" items={items} current={tab} />
      <div role="tabpanel" id={`tabpanel-${tab}`} aria-labelledby={`tab-${tab}`} className="tabpanel">
        {tab === "overview" && <Overview run={run} waterfall={waterfall} now={now} events={events} />}
        {tab === "steps" && <StepsPanel id={run.id} live={ACTIVE_STATUSES.includes(run.status)} events={events} />}
        {tab === "waterfall" && (
          <WaterfallPanel
            waterfall={waterfall}
            events={events}
            run={run}
            kids={{ runs: tree.tree?.children.edges.map((e) => e.node) ?? [], total: children, now }}
          />
        )}
        {tab === "events" && <Timeline id={run.id} complete={complete} />}
        {tab === "tree" && <TreePanel run={run} {...tree} />}
      </div>
    </>
  );
}
