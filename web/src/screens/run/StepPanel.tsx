import { useQuery } from "@apollo/client/react";
import { type ReactNode, useEffect, useRef } from "react";
import { RUN_STEP_DETAIL } from "../../api/documents/runs";
import { ErrorNote, Loading } from "../../ui/common";
import { formatTime } from "../../ui/format";
import { formatMs } from "../../ui/waterfall";
import type { StepRow } from "./stepRows";

/** Under 64 KiB of JSON is drawn whole; more is cut (the API serves a large value in ranges). */
const SHOWN_CHARS = 65_536;

/**
 * One step opened from the Steps tab: when it ran and for how long, the model usage it recorded,
 * the calls it made again and why, the events it emitted, and what it returned (read when it is
 * opened, not with the list). Focus moves to it; Close (or Escape) gives it back to the list.
 */
export function StepPanel({ runId, row, close }: { runId: string; row: StepRow; close: () => void }) {
  const { step } = row;
  const heading = useRef<HTMLHeadingElement>(null);
  const { data, error, loading } = useQuery(RUN_STEP_DETAIL, { variables: { id: runId, after: step.seq - 1 } });
  const recorded = data?.run?.steps.find((s) => s.seq === step.seq);
  useEffect(() => heading.current?.focus(), [step.seq]);
  const title = `${step.name} #${step.occurrence}`;
  return (
    <aside
      className="panel step-panel"
      aria-labelledby="step-panel-heading"
      data-testid="step-panel"
      onKeyDown={(e) => e.key === "Escape" && close()}
    >
      <div className="step-panel-head">
        <h3 id="step-panel-heading" tabIndex={-1} ref={heading}>
          Step <span className="mono">{title}</span>
        </h3>
        <button type="button" onClick={close}>
          Close
        </button>
      </div>
      <dl className="facts">
        <Fact term="Attempt">{step.attempt === 0 ? "0: reused from the run it retried (not run here)" : step.attempt}</Fact>
        <Fact term="Started">{step.startedAt ? formatTime(step.startedAt) : "not recorded"}</Fact>
        <Fact term="Completed">{formatTime(step.completedAt)}</Fact>
        <Fact term="Took">{row.durationMs === null ? "—" : formatMs(row.durationMs)}</Fact>
        <Fact term="Model usage" testId="step-usage" wide>
          {usageText(step.usage)}
        </Fact>
        <Fact term="Events while it ran">
          {row.events.length === 0 ? "none" : row.events.map((e) => `${e.count} ${e.type}`).join(", ")}
        </Fact>
        <Fact term="Calls retried" wide>
          {row.retries.length === 0 ? (
            "none"
          ) : (
            <ol className="plain-list" aria-label="Calls retried">
              {row.retries.map((r) => (
                <li key={r.call}>
                  call {r.call}
                  {r.status !== null && ` (${r.status})`}: {r.error}
                  {r.waitS !== null && `, asked again after ${r.waitS} s`}
                </li>
              ))}
            </ol>
          )}
        </Fact>
      </dl>
      <h4>What it returned</h4>
      {error && <ErrorNote error={error} />}
      {loading && <Loading />}
      {recorded && <ResultText result={recorded.result} />}
    </aside>
  );
}

function Fact({
  term,
  testId,
  wide = false,
  children,
}: {
  term: string;
  testId?: string;
  wide?: boolean;
  children: ReactNode;
}) {
  return (
    <div className={wide ? "wide" : undefined}>
      <dt>{term}</dt>
      <dd data-testid={testId}>{children}</dd>
    </div>
  );
}

function usageText(usage: StepRow["step"]["usage"]): string {
  if (!usage) return "none recorded";
  const cost =
    usage.costUsd === null || usage.costUsd === undefined
      ? `no price for ${usage.model ?? "its model"} (prices: genai-prices, OUTLIVE_MODEL_PRICES)`
      : `${usage.costUsd.toFixed(4)} USD`;
  const model = usage.model ? ` on ${usage.model}` : "";
  return `${usage.requests} request(s)${model}: ${usage.inputTokens} in, ${usage.outputTokens} out; ${cost}`;
}

function ResultText({ result }: { result: unknown }) {
  const text = typeof result === "string" ? result : JSON.stringify(result ?? null, null, 2);
  const cut = text.length > SHOWN_CHARS;
  return (
    <>
      <pre className="step-text" role="region" aria-label="What the step returned" tabIndex={0} data-testid="step-result">
        {cut ? text.slice(0, SHOWN_CHARS) : text}
      </pre>
      {cut && <p className="muted small">The first {SHOWN_CHARS.toLocaleString()} characters of {text.length.toLocaleString()}.</p>}
    </>
  );
}
