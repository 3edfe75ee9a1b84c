import type { ReactNode } from "react";
import { describeError, isUnavailable } from "../api/errors";
import type { RunStatus } from "../api/types";

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
    <pre className="json" aria-label={label} tabIndex={0}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}
