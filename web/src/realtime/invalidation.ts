/**
 * Which queries a nudge concerns.
 *
 * A nudge (contract §5) carries a type, the tenant, a time and maybe an id: never row data. The
 * app never reads anything else out of it. This module is the whole mapping, kept pure so it can
 * be tested without a browser: a nudge becomes a list of query keys, an active query is given a
 * key from its operation name and variables, and a query is refreshed when one of the nudge's
 * keys covers its key.
 */

export interface NudgeLike {
  type: string;
  id?: string | null;
}

/** What a screen shows, as a key the nudges can name. */
export type QueryKey =
  | { kind: "runs" } // every runs list, whatever its filter or page
  | { kind: "run"; id: string } // one run's fields (status, attempt, output …)
  | { kind: "runEvents"; id: string } // one run's timeline
  | { kind: "usage" }
  | { kind: "invitations" }
  | { kind: "webhooks" }; // endpoints and their deliveries

/**
 * The operation names of the app's documents (see `api/documents`): each is one kind of key. An
 * operation not listed here (Viewer, Agents) is never refreshed by a nudge, only on (re)connect,
 * focus and navigation.
 */
export const OPERATIONS = {
  Runs: "runs",
  RunDetail: "run",
  RunTimeline: "runEvents",
  Usage: "usage",
  Invitations: "invitations",
  WebhookEndpoints: "webhooks",
} as const satisfies Record<string, QueryKey["kind"]>;

/** The keys a nudge concerns; an unknown type concerns nothing (a newer server, an older app). */
export function keysForNudge(nudge: NudgeLike): QueryKey[] {
  const id = nudge.id ?? null;
  switch (nudge.type) {
    case "run.created":
      // A new row: every list (it may match the filter) and the usage counts.
      return [{ kind: "runs" }, { kind: "usage" }];
    case "run.updated":
      // Status, attempt, cancel request or output: that run, the lists that show its status, the
      // usage counts by status.
      return id === null
        ? [{ kind: "runs" }, { kind: "usage" }]
        : [{ kind: "run", id }, { kind: "runs" }, { kind: "usage" }];
    case "run.event":
      // A timeline line was appended: only that run's timeline. Its status did not change (a
      // status change comes as its own run.updated), so the lists are left alone.
      return id === null ? [] : [{ kind: "runEvents", id }];
    case "invitation.updated":
      return [{ kind: "invitations" }];
    case "webhook.delivery.updated":
      // The id is a delivery's; deliveries are shown under their endpoints.
      return [{ kind: "webhooks" }];
    default:
      return [];
  }
}

/** The key of an active query, from its operation name and variables; null: not nudge-driven. */
export function keyOfQuery(
  operationName: string | undefined | null,
  variables: Record<string, unknown> | undefined | null,
): QueryKey | null {
  if (!operationName || !Object.hasOwn(OPERATIONS, operationName)) return null;
  const kind = OPERATIONS[operationName as keyof typeof OPERATIONS];
  if (kind === "run" || kind === "runEvents") {
    const id = variables?.["id"];
    return typeof id === "string" ? { kind, id } : null;
  }
  return { kind };
}

/** Whether a nudge's key covers a query's key: same kind and, where there is one, the same id. */
export function covers(nudgeKey: QueryKey, queryKey: QueryKey): boolean {
  if (nudgeKey.kind !== queryKey.kind) return false;
  if ("id" in nudgeKey && "id" in queryKey) return nudgeKey.id === queryKey.id;
  return true;
}

/** Whether a nudge concerns an active query (the one question the refresher asks). */
export function nudgeConcerns(
  nudge: NudgeLike,
  operationName: string | undefined | null,
  variables: Record<string, unknown> | undefined | null,
): boolean {
  const key = keyOfQuery(operationName, variables);
  return key !== null && keysForNudge(nudge).some((k) => covers(k, key));
}
