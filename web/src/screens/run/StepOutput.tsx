import type { Json } from "../../api/types";
import type { LiveText } from "../../realtime/output";

/** The Steps table's columns. */
export const COLUMNS = 5;

function shown(result: Json): string {
  return typeof result === "string" ? result : JSON.stringify(result, null, 2);
}

/** Under a step's row: what it returned, as the journal recorded it. */
export function RecordedOutputRow({ seq, result }: { seq: number; result: Json }) {
  return (
    <tr className="step-output" data-testid="step-output" data-seq={seq}>
      <td colSpan={COLUMNS}>
        <pre className="step-text" role="region" aria-label={`Recorded output of step ${seq}`} tabIndex={0}>
          {shown(result)}
        </pre>
      </td>
    </tr>
  );
}

/**
 * The step in progress (the one after the last completed) and what it is writing: display only,
 * replaced by its recorded output once it completes. `cursor` is the last chunk's (its Redis
 * time: when it was stored), kept on the element for whoever measures the display's lag.
 */
export function LiveStepRow({ seq, texts, cursor }: { seq: number; texts: LiveText[]; cursor: string | null }) {
  const ended = texts.every((t) => t.ended);
  return (
    <tr className="step-live" data-testid="step-live" data-ended={ended} data-cursor={cursor ?? undefined}>
      <td className="mono col-optional">{seq}</td>
      <td colSpan={COLUMNS - 1}>
        <span className="muted small">
          {ended ? "Its stream ended: reading what the step recorded…" : "In progress: live output"}
        </span>
        <LiveTexts texts={texts} label={`Live output of step ${seq}`} testId="live-text" />
      </td>
    </tr>
  );
}

/**
 * What a run is writing, a region per stream (named when there are several): `label` names each
 * region ("Live output of step 3 (answer)"), `testId` marks them for the tests.
 */
export function LiveTexts({ texts, label, testId }: { texts: LiveText[]; label: string; testId: string }) {
  const named = texts.length > 1;
  return (
    <>
      {texts.map((t) => (
        <pre
          key={t.stream}
          className="step-text"
          role="region"
          aria-label={`${label}${named ? ` (${t.stream})` : ""}`}
          tabIndex={0}
          data-testid={testId}
          data-stream={t.stream}
          data-ended={t.ended}
        >
          {named && <span className="muted">{t.stream}: </span>}
          {t.text}
        </pre>
      ))}
    </>
  );
}
