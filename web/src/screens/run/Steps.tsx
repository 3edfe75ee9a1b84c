import { useApolloClient, useQuery } from "@apollo/client/react";
import { Fragment, useEffect, useMemo, useRef, useState } from "react";
import { RUN_STEPS, STEPS_PAGE } from "../../api/documents/runs";
import { liveTexts } from "../../realtime/output";
import { lastStepSeq } from "../../realtime/timeline";
import { ErrorNote, Loading } from "../../ui/common";
import { formatTime } from "../../ui/format";
import { formatMs, type TimelineEvent } from "../../ui/waterfall";
import { EVENTS_WINDOW } from "./events";
import { useLiveSteps } from "./liveSteps";
import { StepPanel } from "./StepPanel";
import { COLUMNS, LiveStepRow, RecordedOutputRow } from "./StepOutput";
import {
  type Entry,
  filterRows,
  foldRows,
  type FailureRow,
  type GroupRow,
  STEP_STATUSES,
  type StepRow,
  type StepStatus,
  stepRows,
  visibleEntries,
} from "./stepRows";

/**
 * A run's durable steps, one row each, in completion order: a step is recorded once, when it
 * completes, whatever attempt ran it (a later attempt replays it from the journal, it does not
 * run it again). Each row folds in what the timeline says about it (`stepRows`): the events it
 * emitted, the calls it made again, how long it took; a failed or lost attempt is a row of its
 * own, where it happened. Consecutive calls of one step fold into a row with their count and
 * total time (not on a tab opened while the run was live: what one watches, the step in
 * progress under the last one, never folds away under them when the run settles). A
 * search and a status filter narrow the rows; a step opens in a side panel. A long list arrives
 * a page at a time and draws a window at a time.
 *
 * While the run is live, the step in progress shows what it is writing (`runOutput`) in a row
 * after the last completed step; once it completes, its row shows what it recorded instead.
 */
export function StepsPanel({
  id,
  live = false,
  events = [],
}: {
  id: string;
  live?: boolean;
  events?: readonly TimelineEvent[];
}) {
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

  const [status, setStatus] = useState<StepStatus>("all");
  const [search, setSearch] = useState("");
  const [open, setOpen] = useState<ReadonlySet<string>>(new Set());
  const [selected, setSelected] = useState<number | null>(null);
  const rows = useMemo(() => stepRows(steps, events), [steps, events]);
  const filtered = filterRows(rows, status, search);
  const [fold] = useState(!live); // decided once: what one watches live never folds under them
  const folded = fold ? foldRows(filtered) : filtered;
  const { entries, total } = visibleEntries(folded, open, shown);
  const failures = rows.filter((r) => r.kind === "failure").length;
  const opened = rows.find((r): r is StepRow => r.kind === "step" && r.step.seq === selected);
  const toggle = (key: string) =>
    setOpen((was) => {
      const next = new Set(was);
      if (!next.delete(key)) next.add(key);
      return next;
    });

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
      {data && steps.length === 0 && texts.length === 0 && failures === 0 && (
        <p className="muted">
          No durable step completed yet (an agent's steps are its <code>ctx.step</code> calls).
        </p>
      )}
      {rows.length > 0 && (
        <div className="filters steps-tools">
          <label>
            Search steps <input type="search" value={search} onChange={(e) => setSearch(e.target.value)} />
          </label>
          <label>
            Show{" "}
            <select value={status} onChange={(e) => setStatus(e.target.value as StepStatus)}>
              {STEP_STATUSES.map((s) => (
                <option key={s.id} value={s.id}>
                  {s.label}
                </option>
              ))}
            </select>
          </label>
          {failures > 0 && status !== "failed" && (
            <button type="button" onClick={() => setStatus("failed")}>
              Jump to the {failures === 1 ? "failure" : `${failures} failures`}
            </button>
          )}
        </div>
      )}
      {opened && <StepPanel runId={id} row={opened} close={() => setSelected(null)} />}
      {rows.length > 0 && filtered.length === 0 && <p className="muted">No step matches.</p>}
      {(filtered.length > 0 || texts.length > 0) && (
        <table className="table steps" aria-label="Steps">
          <thead>
            <tr>
              <th scope="col" className="col-optional">#</th>
              <th scope="col">Step</th>
              <th scope="col">Attempt</th>
              <th scope="col" className="col-optional">Took</th>
              <th scope="col">Completed</th>
            </tr>
          </thead>
          <tbody>
            {entries.map((entry) => (
              <Fragment key={entry.row.key}>
                <EntryRow entry={entry} open={open} toggle={toggle} select={setSelected} />
                {entry.row.kind === "step" && results.has(entry.row.step.seq) && (
                  <RecordedOutputRow seq={entry.row.step.seq} result={results.get(entry.row.step.seq)!} />
                )}
              </Fragment>
            ))}
            {texts.length > 0 && <LiveStepRow seq={last + 1} texts={texts} cursor={output.cursor} />}
          </tbody>
        </table>
      )}
      {total > shown && (
        <p className="actions">
          <span className="muted small">
            Showing {shown} of {total}.
          </span>{" "}
          <button type="button" onClick={() => setShown((n) => n + EVENTS_WINDOW)}>
            Show {Math.min(EVENTS_WINDOW, total - shown)} more
          </button>
        </p>
      )}
    </section>
  );
}

function EntryRow({
  entry,
  open,
  toggle,
  select,
}: {
  entry: Entry;
  open: ReadonlySet<string>;
  toggle: (key: string) => void;
  select: (seq: number) => void;
}) {
  const { row } = entry;
  if (row.kind === "group") return <GroupLine group={row} expanded={open.has(row.key)} toggle={toggle} />;
  if (row.kind === "failure") return <FailureLine failure={row} />;
  const { step } = row;
  return (
    <tr data-seq={step.seq} data-testid="step" className={entry.member ? "step-member" : undefined}>
      <td className="mono col-optional">{step.seq}</td>
      <td>
        <button type="button" className="link mono" onClick={() => select(step.seq)}>
          {step.name}
        </button>{" "}
        <span className="muted small" title="occurrence: its calls of this name so far">
          #{step.occurrence}
        </span>
        <StepNotes row={row} />
      </td>
      <td>{step.attempt}</td>
      <td className="col-optional">{row.durationMs === null ? "—" : formatMs(row.durationMs)}</td>
      <td>
        <time dateTime={step.completedAt} title={step.completedAt}>
          {formatTime(step.completedAt)}
        </time>
      </td>
    </tr>
  );
}

function StepNotes({ row }: { row: StepRow }) {
  const notes = [
    ...row.events.map((e) => `${e.count} ${e.type}`),
    ...(row.retries.length > 0 ? [`${row.retries.length} call(s) retried`] : []),
    ...(row.step.usage ? [`${row.step.usage.inputTokens + row.step.usage.outputTokens} tokens`] : []),
  ];
  if (notes.length === 0) return null;
  return <span className="muted small step-notes"> · {notes.join(" · ")}</span>;
}

function GroupLine({ group, expanded, toggle }: { group: GroupRow; expanded: boolean; toggle: (key: string) => void }) {
  const first = group.rows[0]!.step;
  const last = group.rows[group.rows.length - 1]!.step;
  return (
    <tr className="step-group" data-testid="step-group" data-count={group.rows.length}>
      <td className="mono col-optional">
        {first.seq}–{last.seq}
      </td>
      <td colSpan={2}>
        <button type="button" aria-expanded={expanded} onClick={() => toggle(group.key)}>
          <span className="mono">{group.name}</span> ×{group.rows.length}
        </button>{" "}
        <span className="muted small">
          #{first.occurrence}–#{last.occurrence}, {formatMs(group.totalMs)} in all
        </span>
      </td>
      <td className="col-optional">{formatMs(group.totalMs)}</td>
      <td>
        <time dateTime={last.completedAt} title={last.completedAt}>
          {formatTime(last.completedAt)}
        </time>
      </td>
    </tr>
  );
}

const FAILURE_WORDS: Record<string, string> = {
  failed: "failed: the run failed",
  retrying: "failed: the run was tried again",
  lost: "lost its worker",
};

function FailureLine({ failure }: { failure: FailureRow }) {
  return (
    <tr className="step-failure" data-testid="step-failure" data-seq={failure.seq}>
      <td className="col-optional" />
      <td colSpan={COLUMNS - 2}>
        <strong>
          Attempt {failure.attempt ?? "?"} {FAILURE_WORDS[failure.type] ?? failure.type}
        </strong>
        {failure.error && <span className="mono small">: {failure.error}</span>}
      </td>
      <td>
        <time dateTime={failure.at} title={failure.at}>
          {formatTime(failure.at)}
        </time>
      </td>
    </tr>
  );
}
