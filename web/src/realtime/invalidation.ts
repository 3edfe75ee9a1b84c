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
  | { kind: "runEvents"; id: string } // one run's timeline (and its steps: each appends a `step` event)
  | { kind: "usage" }
  | { kind: "invitations" }
  | { kind: "webhooks" } // endpoints and their deliveries
  | { kind: "replays" } // the bulk replays and their progress
  | { kind: "budgets" } // each budget's spent, reserved and held runs
  | { kind: "members" } // the tenant's members, their roles and live tokens
  | { kind: "schedules" }; // the tenant's schedules, their next and last fires

/**
 * The operation names of the app's documents (see `api/documents`): each is one kind of key. An
 * operation not listed here (Viewer, Agents) is never refreshed by a nudge, only on (re)connect,
 * focus and navigation.
 */
export const OPERATIONS = {
  Runs: "runs",
  RunsCost: "usage", // a runs list page's costs: they move as its runs record usage (run.updated)
  Queue: "runs", // a runs list filtered by status (QUEUED)
  AwaitingInput: "runs", // a runs list filtered by status (WAITING)
  AwaitingCount: "runs", // the nav's count: the same list, ids and waits only
  KeyHolder: "runs", // the Start form's holder of a key: a runs list filtered by status (active)
  RunDetail: "run",
  RunWhy: "run",
  RunTimeline: "runEvents",
  RunSteps: "runEvents", // a step's completion appends its `step` event: the same run.event nudge
  RunTree: "run", // a child's settle nudges its parent; a child it shows is asked for too (planNudges)
  Usage: "usage",
  UsageTokens: "usage", // a settled run's steps recorded what they used
  AgentStats: "usage", // counts by outcome: changes when the usage does
  AgentStates: "usage", // a pause holds or lets go of runs: each gets run.updated, as the usage does
  Invitations: "invitations",
  WebhookEndpoints: "webhooks",
  WebhookEndpointDeliveries: "webhooks", // one endpoint's deliveries, filtered or paged
  WebhookDeliveryAttempts: "webhooks", // one delivery and its attempt log, opened under its row
  RunReplays: "replays",
  Budgets: "budgets",
  Members: "members",
  Schedules: "schedules",
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
    case "replay.updated":
      // A replay was made or moved on: the replays screen asks for its rows (and their counts)
      // again. The runs it starts come as their own run.created nudges.
      return [{ kind: "replays" }];
    case "budget.updated":
      // Spent, reserved, held runs or the limit changed (at most one a second per budget).
      return [{ kind: "budgets" }];
    case "member.updated":
      // Joined, changed role, left, or their tokens changed.
      return [{ kind: "members" }];
    case "schedule.updated":
      // Made, changed, paused, resumed, deleted or fired (its next and last fire moved).
      return [{ kind: "schedules" }];
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

// --- the least that covers a burst of nudges --------------------------------------------------

/** An active query as the planner sees it. */
export interface ActiveQuery {
  name: string | undefined | null;
  variables: Record<string, unknown> | undefined | null;
  /** Whether this query's current answer shows that run (a runs list, or a run's children). */
  shows(runId: string): boolean;
}

/**
 * What to ask for:
 * - `refetch`: ask the query at `index` again (the timeline asks only for the events after its last
 *   seq: see realtime/timeline.ts);
 * - `fetchRun`: ask for that one run (`RunDetail`); Apollo's normalized cache then updates every
 *   list that shows it, without asking for the lists.
 */
export type Action = { kind: "refetch"; index: number } | { kind: "fetchRun"; id: string };

/** A runs list whose rows can change membership when a run changes (a status filter). */
function isFiltered(variables: Record<string, unknown> | undefined | null): boolean {
  const status = variables?.["status"];
  return Array.isArray(status) && status.length > 0;
}

/**
 * The least that covers a burst of nudges, for the queries on screen:
 * - `run.created`: every runs list (the new row may belong in it) and the usage;
 * - `run.updated` (id): that run alone when a screen shows it (its detail, or an unfiltered list
 *   that holds it: the normalized cache updates the list), the lists filtered by status (the run
 *   may enter or leave them) and the usage (counts by status); an unfiltered list that does not
 *   hold the run is not asked again; a run's tree that shows it among its children is asked
 *   again (the parent's counts by status changed with it);
 * - `run.event` (id): that run's timeline, after the last seq it holds;
 * - the others as `keysForNudge` says.
 * Each query and each run is asked for at most once per burst.
 */
export function planNudges(nudges: readonly NudgeLike[], queries: readonly ActiveQuery[]): Action[] {
  const refetch = new Set<number>();
  const runs = new Set<string>();
  const each = (kind: QueryKey["kind"], then: (q: ActiveQuery, i: number) => void) =>
    queries.forEach((q, i) => {
      if (keyOfQuery(q.name, q.variables)?.kind === kind) then(q, i);
    });
  for (const nudge of nudges) {
    const id = nudge.id ?? null;
    if (nudge.type === "run.updated" && id !== null) {
      let detail = false;
      let listed = false;
      each("run", (q, i) => {
        if (q.variables?.["id"] === id) {
          detail = true;
          refetch.add(i);
        } else if (q.shows(id)) refetch.add(i); // a tree whose children hold it
      });
      each("runs", (q, i) => {
        if (isFiltered(q.variables)) refetch.add(i);
        else listed ||= q.shows(id);
      });
      each("usage", (_, i) => refetch.add(i));
      if (listed && !detail) runs.add(id); // the detail's answer updates the lists already
      continue;
    }
    queries.forEach((q, i) => {
      if (nudgeConcerns(nudge, q.name, q.variables)) refetch.add(i);
    });
  }
  return [
    ...[...refetch].sort((a, b) => a - b).map((index) => ({ kind: "refetch" as const, index })),
    ...[...runs].map((id) => ({ kind: "fetchRun" as const, id })),
  ];
}
