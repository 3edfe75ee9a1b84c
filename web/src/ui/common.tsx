import { type ReactNode, useEffect, useState } from "react";
import { describeError, isUnavailable } from "../api/errors";
import type { RunStatus } from "../api/types";
import { formatAbsolute, formatRelative, formatTime, timeZone } from "./format";

export function StatusBadge({ status, testId }: { status: RunStatus | string; testId?: string }) {
  return (
    <span className={`badge badge-${status.toLowerCase()}`} data-status={status} data-testid={testId}>
      {status}
    </span>
  );
}

export function ErrorNote({ error, what }: { error: unknown; what?: string }) {
  if (isUnavailable(error)) {
    return (
      <p className="note note-muted" role="note">
        This server does not offer {what ?? "this"} yet: it is in the API contract and will
        show up here once the server has it.
      </p>
    );
  }
  return (
    <p className="note note-error" role="alert">
      {describeError(error)}
    </p>
  );
}

export function Loading({ children = "Loading…" }: { children?: ReactNode }) {
  return (
    <p className="note note-muted" aria-busy="true">
      {children}
    </p>
  );
}

export function Json({ value, label }: { value: unknown; label: string }) {
  return (
    <pre className="json" role="region" aria-label={label} tabIndex={0}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}

/** Re-renders every `ms` (relative times stay true while a screen is open). */
export function useNow(ms = 15_000): number {
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}

/**
 * A moment: date and time in the person's zone plus "3 min ago"; the absolute time, with the zone,
 * on hover (and for screen readers in `dateTime`).
 */
export function When({ iso, relative = true }: { iso: string | null | undefined; relative?: boolean }) {
  useNow(); // re-renders now and then; the time is read fresh at each render
  const now = Date.now();
  if (!iso) return <span className="muted">—</span>;
  return (
    <time dateTime={iso} title={`${formatAbsolute(iso)} (${timeZone()})`} className="when">
      {formatTime(iso)}
      {relative && <span className="muted small"> · {formatRelative(iso, now)}</span>}
    </time>
  );
}

/** Copies `value`; says so for a moment. */
export function CopyButton({ value, label, text = "Copy" }: { value: string; label: string; text?: string }) {
  const [copied, setCopied] = useState(false);
  useEffect(() => {
    if (!copied) return;
    const timer = setTimeout(() => setCopied(false), 1500);
    return () => clearTimeout(timer);
  }, [copied]);
  return (
    <button
      type="button"
      className="copy quiet"
      aria-label={label}
      title={label}
      onClick={() =>
        void navigator.clipboard?.writeText(value).then(
          () => setCopied(true),
          () => setCopied(false),
        )
      }
    >
      {copied ? "Copied" : text}
    </button>
  );
}

/** JSON folded behind a summary line; open it to read it all. */
export function JsonDetails({ value, label, open = false }: { value: unknown; label: string; open?: boolean }) {
  const text = JSON.stringify(value) ?? "null";
  return (
    <details className="json-details" open={open}>
      <summary>
        <span className="visually-hidden">{label}: </span>
        <span className="mono">{text.length > 80 ? `${text.slice(0, 80)}…` : text}</span>
      </summary>
      <Json value={value} label={label} />
    </details>
  );
}
