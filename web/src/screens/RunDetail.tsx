import { useApolloClient, useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useRef, useState } from "react";
import {
  CANCEL_RUN,
  EVENTS_PAGE,
  RETRY_RUN,
  RUN_DETAIL,
  RUN_STEPS,
  RUN_TIMELINE,
  RUN_WHY,
  SIGNAL_RUN,
  STEPS_PAGE,
} from "../api/documents/runs";
import { describeError } from "../api/errors";
import type { RunFieldsFragment, RunWhyFieldsFragment } from "../api/generated";
import { ACTIVE_STATUSES } from "../api/types";
import { Link, navigate, useLocation } from "../app/router";
import { lastSeq, lastStepSeq } from "../realtime/timeline";
import { CopyButton, ErrorNote, Json, JsonDetails, Loading, StatusBadge, useNow, When } from "../ui/common";
import { compactJson, formatDuration, formatRelative, formatTime, shortId } from "../ui/format";
import { APPROVAL, approvalInput, NOT_ACCEPTED, readSignalForm, type SignalInput } from "../ui/signal";
import { waitingDetail, waitingSentence } from "../ui/waiting";
import {
  type Band,
  buildWaterfall,
  END_WORDS,
  formatMs,
  RESUMED_WORDS,
  type TimelineEvent,
  type WaitBand,
  type Waterfall,
} from "../ui/waterfall";

/** The run as the page knows it: its fields, and why it is here once RunWhy has answered. */
type DetailRun = RunFieldsFragment & Partial<RunWhyFieldsFragment>;

/** One run: its fields (live on run.updated), its timeline (live on run.event), Cancel run. */
export function RunDetail({ id }: { id: string }) {
  const { params } = useLocation();
  const { data, error, loading } = useQuery(RUN_DETAIL, { variables: { id } });
  const why = useQuery(RUN_WHY, { variables: { id } });
  const refetchWhy = why.refetch;
  const [cancelRun, cancelling] = useMutation(CANCEL_RUN);
  const [retryRun, retrying] = useMutation(RETRY_RUN);
  const run = data?.run;
  const onRetry = async () => {
    if (!run) return;
    try {
      const result = await retryRun({ variables: { id: run.id } });
      const payload = result.data?.retryRun;
      if (payload) navigate(`/runs/${payload.run.id}${payload.created ? "" : "?existing=1"}`);
    } catch {
      // shown below from `retrying.error`
    }
  };

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
        <div className="toolbar">
          {active ? (
            <button
              type="button"
              className="danger"
              disabled={cancelRequested || cancelling.loading}
              onClick={() => void cancelRun({ variables: { id: run.id } }).catch(() => undefined)}
            >
              Cancel run
            </button>
          ) : (
            <button type="button" className="primary" disabled={retrying.loading} onClick={() => void onRetry()}>
              Retry
            </button>
          )}
        </div>
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
      {retrying.error && (
        <p className="note note-error" role="alert">
          {describeError(retrying.error)}
        </p>
      )}
      {error && <ErrorNote error={error} />}
      <dl className="facts">
        <div>
          <dt>Status</dt>
          <dd>
            <StatusBadge status={run.status} testId="run-status" />
            {cancelRequested && active && (
              <span className="muted small fact-note"> cancel requested {formatTime(run.cancelRequestedAt)}</span>
            )}
          </dd>
        </div>
        <div>
          <dt>Attempt</dt>
          <dd>{run.attempt}</dd>
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
        <div className="wide">
          <dt>Id</dt>
          <dd>
            <span className="mono">{run.id}</span> <CopyButton value={run.id} label="Copy run id" />
          </dd>
        </div>
      </dl>
      {run.error && (
        <div className="note note-error" role="note" aria-label="Error">
          <strong>Error:</strong> {run.error}
        </div>
      )}
      {/* The run page is a list of panels: why it is here, the signal form (while not settled),
          the waterfall, the steps and the timeline. */}
      <RunPanels run={{ ...run, ...(why.data?.run ?? {}) }} />
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
    </section>
  );
}

/** The panels under a run's facts: why it is here, then its waterfall and timeline. */
function RunPanels({ run }: { run: DetailRun }) {
  const { data } = useQuery(RUN_TIMELINE, { variables: { id: run.id, after: 0 } });
  const events = data?.run?.events ?? [];
  const now = useNow(ACTIVE_STATUSES.includes(run.status) ? 1000 : 30_000); // a live band grows
  const waterfall = buildWaterfall(events, run, now);
  return (
    <div className="panels">
      <WhyPanel run={run} waterfall={waterfall} now={now} />
      <SignalPanel run={run} />
      <WaterfallPanel waterfall={waterfall} events={events} />
      <StepsPanel id={run.id} />
      <Timeline id={run.id} />
    </div>
  );
}

/** In words: why the run is where it is, from the fields the API gives and the timeline. */
export function whyLines(run: DetailRun, waterfall: Waterfall, now: number): string[] {
  const lines: string[] = [];
  if (run.retriedFromId) lines.push(`It retries run ${shortId(run.retriedFromId)}, with the same input.`);
  switch (run.status) {
    case "QUEUED":
      lines.push(
        run.waitingReason
          ? `Waiting for a slot: ${run.waitingReason}.`
          : `Queued ${formatRelative(run.createdAt, now)}, waiting for a worker to claim it.`,
      );
      break;
    case "RUNNING": {
      lines.push(`Attempt ${run.attempt} is running.`);
      if (run.heartbeatAt) {
        lines.push(`Its worker was last heard from at ${formatTime(run.heartbeatAt)} (${formatRelative(run.heartbeatAt, now)}).`);
      }
      if (run.leaseExpiresAt) {
        const left = new Date(run.leaseExpiresAt).getTime() - now;
        lines.push(
          left > 0
            ? `Its lease runs out at ${formatTime(run.leaseExpiresAt)} unless the worker heartbeats first: if the worker stops answering, another worker takes the run over then.`
            : `Its lease ran out at ${formatTime(run.leaseExpiresAt)} (${formatRelative(run.leaseExpiresAt, now)}) with no heartbeat: another worker takes the run over.`,
        );
      }
      if (run.cancelRequestedAt) lines.push("Cancel was requested: it stops before its next turn.");
      break;
    }
    case "WAITING":
      lines.push(waitingSentence(run, now));
      lines.push(waitingDetail(run));
      if (run.waitingFor === APPROVAL) lines.push("Approve or Reject below sends it `{approved: true}` or `{approved: false}`.");
      break;
    case "SUCCEEDED":
      lines.push(`It succeeded ${formatRelative(run.finishedAt, now)} after ${run.attempt} attempt(s).`);
      break;
    case "FAILED":
      lines.push(`It failed ${formatRelative(run.finishedAt, now)}${run.error ? `: ${run.error}` : "."}`);
      break;
    case "CANCELLED":
      lines.push(`It was cancelled ${formatRelative(run.finishedAt, now)}.`);
      break;
    default:
      // A status newer than this app: say it as it is.
      lines.push(`Its status is ${run.status}.`);
  }
  for (const wait of waterfall.waits) {
    if (wait.by === null) continue; // the current wait: said above
    const what = wait.for ? `waited for the signal \`${wait.for}\`` : "slept";
    lines.push(`It ${what} for ${formatMs(wait.duration)}, then was ${RESUMED_WORDS[wait.by] ?? wait.by}.`);
  }
  for (const band of waterfall.bands) {
    if (band.end === "lost") {
      const silent = band.alive ?? 0;
      lines.push(
        `Attempt ${band.attempt} lost its worker: silent after ${formatMs(silent)}, taken over ${formatMs(band.duration)} after it was claimed.`,
      );
    } else if (band.end === "retrying") {
      const error = (band.endData as { error?: unknown } | null)?.error;
      lines.push(`Attempt ${band.attempt} hit a retryable fault${typeof error === "string" ? ` (${error})` : ""} and was retried.`);
    }
  }
  if ((run.lostAttempts ?? 0) > 0) {
    lines.push(
      `${run.lostAttempts} attempt(s) lost their worker; they use up no retry, but a run fails after losing its worker 3 times.`,
    );
  }
  return lines;
}

/** A sentence with its `names` (signal names, payloads) set as code. */
function Words({ text }: { text: string }) {
  return (
    <>
      {text.split("`").map((part, i) => (i % 2 === 1 ? <code key={i}>{part}</code> : part))}
    </>
  );
}

function WhyPanel({ run, waterfall, now }: { run: DetailRun; waterfall: Waterfall; now: number }) {
  const lines = whyLines(run, waterfall, now);
  return (
    <section className="panel" aria-labelledby="why-heading">
      <h2 id="why-heading">Why it is here</h2>
      <ul className="why" aria-label="Why it is here">
        {lines.map((line) => (
          <li key={line}>
            <Words text={line} />
          </li>
        ))}
      </ul>
      {run.retriedFromId && (
        <p className="small">
          <Link to={`/runs/${run.retriedFromId}`}>Open the run it retries</Link>
        </p>
      )}
    </section>
  );
}

function pct(value: number, span: number): string {
  return `${Math.min(100, Math.max(0, (value / span) * 100)).toFixed(3)}%`;
}

function Bar({ offset, duration, span, className, alive }: { offset: number; duration: number; span: number; className: string; alive?: number | null }) {
  const width = Math.max((duration / span) * 100, 0.6);
  const aliveShare = alive != null && duration > 0 ? Math.min(100, (alive / duration) * 100) : null;
  return (
    <div className="track" aria-hidden="true">
      <div
        className={`bar-band ${className}`}
        style={{
          left: pct(offset, span),
          width: `${Math.min(width, 100)}%`,
          ...(aliveShare !== null ? { ["--alive" as string]: `${aliveShare}%` } : {}),
        }}
      />
    </div>
  );
}

function BandRow({ band, span }: { band: Band; span: number }) {
  return (
    <li className={`band band-${band.end}`} data-attempt={band.attempt} data-end={band.end}>
      <div className="band-head">
        <span className="band-name">Attempt {band.attempt}</span>
        <span className={`badge badge-end-${band.end}`}>{END_WORDS[band.end]}</span>
        <span className="muted small">
          +{formatMs(band.offset)} · {formatMs(band.duration)}
          {band.alive !== null && ` (silent after ${formatMs(band.alive)})`}
        </span>
      </div>
      <Bar offset={band.offset} duration={band.duration} span={span} className={`bar-${band.end}`} alive={band.alive} />
      {band.segments.length > 0 && (
        <ol className="segments" aria-label={`Attempt ${band.attempt} turns`}>
          {band.segments.map((seg) => (
            <li key={seg.seq} className={`segment segment-${seg.type}`} data-seq={seg.seq}>
              <div className="band-head">
                <span>{seg.label}</span>
                <span className="muted small">
                  +{formatMs(seg.offset)} · {formatMs(seg.duration)}
                </span>
              </div>
              <Bar
                offset={seg.offset}
                duration={seg.duration}
                span={span}
                className={seg.type === "step" ? "bar-step" : "bar-segment"}
              />
              <JsonDetails value={seg.data} label={`${seg.label} data`} />
            </li>
          ))}
        </ol>
      )}
      {band.endData !== null && band.end !== "succeeded" && <JsonDetails value={band.endData} label={`Attempt ${band.attempt} end`} />}
    </li>
  );
}

function WaitRow({ wait, span }: { wait: WaitBand; span: number }) {
  const what = wait.for ? `Waiting for \`${wait.for}\`` : "Sleeping";
  const end = wait.by === null ? "still waiting" : (RESUMED_WORDS[wait.by] ?? wait.by);
  return (
    <li className="band band-wait" data-end="wait" data-by={wait.by ?? ""}>
      <div className="band-head">
        <span className="band-name">
          <Words text={what} />
        </span>
        <span className="badge badge-waiting">{end}</span>
        <span className="muted small">
          +{formatMs(wait.offset)} · {formatMs(wait.duration)}
          {wait.until && ` · until ${formatTime(wait.until)}`}
          {wait.signals.length > 0 && ` · signal ${wait.signals.join(", ")}`}
        </span>
      </div>
      <Bar offset={wait.offset} duration={wait.duration} span={span} className="bar-wait" />
    </li>
  );
}

/** A run's completed durable steps, in completion order; a long list arrives a page at a time. */
function StepsPanel({ id }: { id: string }) {
  const client = useApolloClient();
  const { data, error, loading } = useQuery(RUN_STEPS, { variables: { id, after: 0 } });
  const steps = data?.run?.steps ?? [];
  const asked = useRef(-1);

  useEffect(() => {
    const last = lastStepSeq(data);
    if (loading || steps.length === 0 || steps.length % STEPS_PAGE !== 0 || asked.current === last) return;
    asked.current = last;
    void client
      .query({ query: RUN_STEPS, variables: { id, after: last }, fetchPolicy: "network-only" })
      .catch(() => undefined);
  }, [client, id, data, steps.length, loading]);

  return (
    <section className="panel" aria-labelledby="steps-heading">
      <h2 id="steps-heading">
        Steps <span className="muted small">({steps.length} completed)</span>
      </h2>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && steps.length === 0 && (
        <p className="muted">
          No durable step completed yet (an agent's steps are its <code>ctx.step</code> calls).
        </p>
      )}
      {steps.length > 0 && (
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
            {steps.map((step) => (
              <tr key={step.seq} data-seq={step.seq} data-testid="step">
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
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

/**
 * Sends a named signal with a JSON payload (checked as JSON before anything is sent). When the
 * run waits for `approval`, Approve and Reject send `{approved: true}` / `{approved: false}`.
 */
function SignalPanel({ run }: { run: DetailRun }) {
  const [signalRun, sending] = useMutation(SIGNAL_RUN);
  const [name, setName] = useState("");
  const [payload, setPayload] = useState("{}");
  const [key, setKey] = useState("");
  const [formError, setFormError] = useState<{ field: "name" | "payload"; error: string } | null>(null);
  const [outcome, setOutcome] = useState<{ accepted: boolean; name: string } | null>(null);
  const waitsForApproval = run.status === "WAITING" && run.waitingFor === APPROVAL;
  const settled = !ACTIVE_STATUSES.includes(run.status);

  const send = async (input: SignalInput) => {
    setOutcome(null);
    try {
      const result = await signalRun({ variables: { input } });
      const answer = result.data?.signalRun;
      if (answer) setOutcome({ accepted: answer.accepted, name: input.name });
    } catch {
      // shown below from `sending.error`
    }
  };
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const form = readSignalForm(run.id, name || run.waitingFor || "", payload, key);
    if (!form.ok) {
      setFormError({ field: form.field, error: form.error });
      return;
    }
    setFormError(null);
    void send(form.input);
  };
  const nameError = formError?.field === "name" ? formError.error : null;
  const payloadError = formError?.field === "payload" ? formError.error : null;
  const answer = (
    <>
      {sending.error && (
        <p className="note note-error" role="alert">
          {describeError(sending.error)}
        </p>
      )}
      {outcome &&
        (outcome.accepted ? (
          <p className="note" role="status" data-testid="signal-outcome" data-accepted="true">
            Signal <code>{outcome.name}</code> accepted.
          </p>
        ) : (
          <p className="note note-error" role="alert" data-testid="signal-outcome" data-accepted="false">
            {NOT_ACCEPTED}
          </p>
        ))}
    </>
  );
  // A settled run takes no signal: the form goes, but the answer to the last send stays (an
  // `accepted: false` that raced the settle must still be seen).
  if (settled) {
    return outcome || sending.error ? (
      <section className="panel" aria-labelledby="signal-heading">
        <h2 id="signal-heading">Signal</h2>
        {answer}
      </section>
    ) : null;
  }

  return (
    <section className="panel" aria-labelledby="signal-heading">
      <h2 id="signal-heading">Signal</h2>
      {waitsForApproval && (
        <div className="actions approval" role="group" aria-label="Approval">
          <button type="button" className="primary" disabled={sending.loading} onClick={() => void send(approvalInput(run, true))}>
            Approve
          </button>
          <button type="button" className="danger" disabled={sending.loading} onClick={() => void send(approvalInput(run, false))}>
            Reject
          </button>
          <span className="muted small">
            sends the signal <code>approval</code> with <code>{"{approved: true}"}</code> or <code>{"{approved: false}"}</code>
          </span>
        </div>
      )}
      <form onSubmit={submit} noValidate aria-label="Send a signal" className="signal-form">
        <div className="field">
          <label htmlFor="signal-name">Name</label>
          <input
            id="signal-name"
            name="name"
            value={name}
            placeholder={run.waitingFor ?? "approval"}
            aria-invalid={nameError ? true : undefined}
            aria-describedby={nameError ? "signal-name-error" : undefined}
            onChange={(e) => setName(e.target.value)}
          />
          {!nameError && run.waitingFor && (
            <p className="hint">Empty: the signal it waits for, <code>{run.waitingFor}</code>.</p>
          )}
          {nameError && (
            <p className="field-error" id="signal-name-error" role="alert">
              {nameError}
            </p>
          )}
        </div>
        <div className="field">
          <label htmlFor="signal-payload">Payload (JSON)</label>
          <textarea
            id="signal-payload"
            name="payload"
            className="mono"
            rows={3}
            spellCheck={false}
            value={payload}
            aria-invalid={payloadError ? true : undefined}
            aria-describedby={payloadError ? "signal-payload-error" : undefined}
            onChange={(e) => setPayload(e.target.value)}
          />
          {payloadError && (
            <p className="field-error" id="signal-payload-error" role="alert">
              {payloadError}
            </p>
          )}
        </div>
        <div className="field">
          <label htmlFor="signal-key">Idempotency key (optional)</label>
          <input id="signal-key" name="idempotencyKey" value={key} onChange={(e) => setKey(e.target.value)} />
          <p className="hint">The same key twice delivers the signal once.</p>
        </div>
        <div className="actions">
          <button type="submit" disabled={sending.loading}>
            Send signal
          </button>
        </div>
      </form>
      {answer}
    </section>
  );
}

function WaterfallPanel({ waterfall, events }: { waterfall: Waterfall; events: readonly TimelineEvent[] }) {
  return (
    <section className="panel" aria-labelledby="waterfall-heading">
      <h2 id="waterfall-heading">
        Waterfall <span className="muted small">({formatMs(waterfall.span)} from creation)</span>
      </h2>
      {events.length === 0 && waterfall.bands.length === 0 ? (
        <p className="muted">Not claimed yet.</p>
      ) : (
        <ol className="waterfall" aria-label="Waterfall">
          {waterfall.queued !== null && (
            <li className="band band-queued" data-end="queued">
              <div className="band-head">
                <span className="band-name">Queued</span>
                <span className="muted small">+0 ms · {formatMs(waterfall.queued)}</span>
              </div>
              <Bar offset={0} duration={waterfall.queued} span={waterfall.span} className="bar-queued" />
            </li>
          )}
          {[
            ...waterfall.bands.map((band) => ({ at: band.offset, order: 0, band, wait: null })),
            ...waterfall.waits.map((wait) => ({ at: wait.offset, order: 1, band: null, wait })),
          ]
            .sort((a, b) => a.at - b.at || a.order - b.order)
            .map((row) =>
              row.band ? (
                <BandRow key={`a-${row.band.attempt}-${row.band.offset}`} band={row.band} span={waterfall.span} />
              ) : (
                <WaitRow key={`w-${row.wait!.seq}`} wait={row.wait!} span={waterfall.span} />
              ),
            )}
        </ol>
      )}
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
