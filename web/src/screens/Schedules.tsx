import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import {
  CREATE_SCHEDULE,
  DELETE_SCHEDULE,
  PAUSE_SCHEDULE,
  RESUME_SCHEDULE,
  type Schedule,
  SCHEDULES,
  TRIGGER_SCHEDULE,
} from "../api/documents/schedules";
import { AGENTS } from "../api/documents/viewer";
import { describeError } from "../api/errors";
import { Link } from "../app/router";
import { ErrorNote, Loading, useNow, When } from "../ui/common";
import { Confirmed } from "../ui/Confirmed";
import { FormOutcome, useFieldProblems } from "../ui/fields";
import { compactJson, inputPreview, shortId } from "../ui/format";
import {
  EMPTY_SCHEDULE,
  localZone,
  nextFire,
  OVERLAPS,
  overlapWords,
  readScheduleForm,
  type ScheduleField,
  type ScheduleForm,
} from "./schedules";

/**
 * The tenant's schedules (CONTRACT §7 "Schedules"): each with its cron and zone, when it fires
 * next and last fired, its key and overlap policy, and Run now, Pause / Resume and Delete (asks);
 * a form to add one. Follows schedule.updated nudges (each write and each fire sends one).
 */
export function Schedules() {
  const { data, error, loading } = useQuery(SCHEDULES);
  const now = useNow(15_000);
  useEffect(() => {
    document.title = "Schedules · Outlive";
  }, []);
  const schedules = data?.schedules ?? [];
  return (
    <section aria-labelledby="schedules-heading">
      <h1 id="schedules-heading">Schedules</h1>
      <p className="muted">
        Each occurrence of a schedule starts one run of its agent, once, whatever the number of workers; an occurrence
        missed by less than the catch-up window (an outage) still runs. A paused schedule skips its occurrences until it
        is resumed.
      </p>
      {error && <ErrorNote error={error} what="schedules" />}
      {!data && loading && <Loading />}
      {data && schedules.length === 0 && <p className="empty">No schedules: runs start only when asked.</p>}
      {schedules.length > 0 && (
        <div className="table-wrap">
          <table className="table cards-narrow" aria-label="Schedules">
            <thead>
              <tr>
                <th scope="col">Agent</th>
                <th scope="col">When</th>
                <th scope="col">Next</th>
                <th scope="col">Last</th>
                <th scope="col">Runs</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {schedules.map((s) => (
                <ScheduleRow key={s.id} schedule={s} now={now} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      {data && <ScheduleEditor />}
    </section>
  );
}

function ScheduleRow({ schedule: s, now }: { schedule: Schedule; now: number }) {
  const [trigger, triggering] = useMutation(TRIGGER_SCHEDULE);
  const [pause, pausing] = useMutation(PAUSE_SCHEDULE);
  const [resume, resuming] = useMutation(RESUME_SCHEDULE);
  const [remove, removing] = useMutation(DELETE_SCHEDULE, { refetchQueries: ["Schedules"] });
  const [said, setSaid] = useState<{ text: string; runId?: string } | null>(null);
  const busy = triggering.loading || pausing.loading || resuming.loading || removing.loading ? true : undefined;
  const error = triggering.error ?? pausing.error ?? resuming.error ?? removing.error;
  const label = `Schedule ${shortId(s.id)} of ${s.agent}`;
  const act = (what: () => Promise<unknown>) => {
    if (busy) return;
    setSaid(null);
    void what().catch(() => undefined);
  };
  const runNow = () =>
    act(async () => {
      const done = await trigger({ variables: { id: s.id } });
      const payload = done.data?.triggerSchedule;
      if (payload) {
        setSaid({ text: payload.created ? "Started" : "Its last run is still active:", runId: payload.run.id });
      }
    });
  return (
    <tr data-schedule-id={s.id}>
      <td data-label="Agent">
        <span className="mono">{s.agent}</span>
        {s.paused && (
          <>
            {" "}
            <span className="badge badge-waiting" data-testid="schedule-paused">
              PAUSED
            </span>
          </>
        )}
        <div className="mono small muted schedule-cell" title={compactJson(s.input)}>
          {inputPreview(s.input, 80)}
        </div>
      </td>
      <td data-label="When">
        <code>{s.cron}</code> <span className="muted small">{s.timezone}</span>
        {s.jitterSeconds > 0 && <div className="small muted">± up to {s.jitterSeconds} s</div>}
      </td>
      <td data-label="Next" data-testid="schedule-next">
        {s.nextFireAt && !s.paused ? (
          <time dateTime={s.nextFireAt} title={s.nextFireAt}>
            {nextFire(s, now)}
          </time>
        ) : (
          nextFire(s, now)
        )}
      </td>
      <td data-label="Last">{s.lastFireAt ? <When iso={s.lastFireAt} /> : <span className="muted">never</span>}</td>
      <td data-label="Runs">
        <span className="small schedule-cell">
          key <span className="mono">{s.key}</span>
        </span>
        <div className="small muted">{overlapWords(s.onConflict)}</div>
      </td>
      <td data-label="Actions">
        <div className="held-actions" role="group" aria-label={label}>
          <button type="button" className="primary" aria-disabled={busy} onClick={runNow}>
            Run now
          </button>
          {s.paused ? (
            <button type="button" aria-disabled={busy} onClick={() => act(() => resume({ variables: { id: s.id } }))}>
              Resume
            </button>
          ) : (
            <button type="button" aria-disabled={busy} onClick={() => act(() => pause({ variables: { id: s.id } }))}>
              Pause
            </button>
          )}
          <Confirmed
            ask="Delete…"
            question="Delete this schedule?"
            warning="Its runs stay."
            yes="Yes, delete it"
            busy={busy}
            onYes={() => act(() => remove({ variables: { id: s.id } }))}
          />
        </div>
        {said && !error && (
          <p className="small" role="status" data-testid="schedule-outcome">
            {said.text}{" "}
            {said.runId && (
              <Link to={`/runs/${said.runId}`} className="mono">
                {shortId(said.runId)}
              </Link>
            )}
          </p>
        )}
        {error && (
          <p className="note note-error small" role="alert">
            {describeError(error)}
          </p>
        )}
      </td>
    </tr>
  );
}

const FIELD_IDS: Record<ScheduleField, string> = {
  agent: "schedule-agent",
  cron: "schedule-cron",
  timezone: "schedule-timezone",
  input: "schedule-input",
  jitterSeconds: "schedule-jitter",
};

/** Add a schedule: the form checks what needs no server; the server checks the cron and zone. */
function ScheduleEditor() {
  const agents = useQuery(AGENTS);
  const [form, setForm] = useState<ScheduleForm>(() => ({ ...EMPTY_SCHEDULE, timezone: localZone() }));
  const { show, clear, described, fieldError } = useFieldProblems<ScheduleField>(FIELD_IDS);
  const [saved, setSaved] = useState<string | null>(null);
  const [create, creating] = useMutation(CREATE_SCHEDULE, { refetchQueries: ["Schedules"] });
  const set = <K extends keyof ScheduleForm>(key: K, value: ScheduleForm[K]) => setForm((f) => ({ ...f, [key]: value }));
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    const read = readScheduleForm(form);
    if (!read.ok) {
      show(read.field, read.error);
      return;
    }
    clear();
    setSaved(null);
    try {
      await create({ variables: { input: read.input } });
      setSaved(`Added: ${read.input.agent} at ${read.input.cron} (${read.input.timezone}).`);
      setForm((f) => ({ ...EMPTY_SCHEDULE, timezone: f.timezone }));
    } catch {
      // shown below
    }
  };
  const names = (agents.data?.agents ?? []).map((a) => a.name);
  return (
    <form className="card budget-form" onSubmit={submit} aria-labelledby="schedule-form-heading" noValidate>
      <h2 id="schedule-form-heading">Add a schedule</h2>
      <div className="budget-fields">
        <div className="field">
          <label htmlFor="schedule-agent">Agent</label>
          <select id="schedule-agent" value={form.agent} onChange={(e) => set("agent", e.target.value)} {...described("agent")}>
            <option value="">Pick an agent</option>
            {names.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
          {fieldError("agent")}
        </div>
        <div className="field">
          <label htmlFor="schedule-cron">Cron</label>
          <input id="schedule-cron" className="mono" value={form.cron} onChange={(e) => set("cron", e.target.value)} {...described("cron")} />
          {fieldError("cron")}
        </div>
        <div className="field">
          <label htmlFor="schedule-timezone">Time zone</label>
          <input id="schedule-timezone" value={form.timezone} onChange={(e) => set("timezone", e.target.value)} {...described("timezone")} />
          {fieldError("timezone")}
        </div>
        <div className="field">
          <label htmlFor="schedule-overlap">While the last run is active</label>
          <select id="schedule-overlap" value={form.onConflict} onChange={(e) => set("onConflict", e.target.value as ScheduleForm["onConflict"])}>
            {OVERLAPS.map((o) => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor="schedule-key">Key</label>
          <input id="schedule-key" value={form.key} placeholder="schedule:<id>" onChange={(e) => set("key", e.target.value)} />
        </div>
        <div className="field">
          <label htmlFor="schedule-jitter">Jitter (s)</label>
          <input id="schedule-jitter" inputMode="numeric" value={form.jitterSeconds} onChange={(e) => set("jitterSeconds", e.target.value)} {...described("jitterSeconds")} />
          {fieldError("jitterSeconds")}
        </div>
        <div className="field">
          <label htmlFor="schedule-input">Input (JSON)</label>
          <textarea id="schedule-input" className="mono" rows={3} value={form.input} onChange={(e) => set("input", e.target.value)} {...described("input")} />
          {fieldError("input")}
        </div>
      </div>
      <div className="actions">
        <button type="submit" className="primary" aria-disabled={creating.loading ? true : undefined}>
          Add schedule
        </button>
      </div>
      <FormOutcome error={creating.error} saved={saved} />
    </form>
  );
}
