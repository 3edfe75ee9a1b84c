import type { ApolloClient } from "@apollo/client";
import type { RunStepsData, RunTimelineData } from "../api/documents/runs";
import { EVENTS_PAGE, RUN_STEPS, RUN_TIMELINE, STEPS_PAGE } from "../api/documents/runs";
import type { AnyQuery } from "./refresh";

/** The last seq a timeline holds (0 when it holds none). */
export function lastSeq(data: RunTimelineData | null | undefined): number {
  const events = data?.run?.events ?? [];
  return events.length ? events[events.length - 1]!.seq : 0;
}

/** The last seq a steps list holds (0 when it holds none). */
export function lastStepSeq(data: RunStepsData | null | undefined): number {
  const steps = data?.run?.steps ?? [];
  return steps.length ? steps[steps.length - 1]!.seq : 0;
}

/**
 * Asks the API for the events after the last one the cache holds for this run, page by page until
 * a page is not full. The answer is written to the cache like any query's, where the `events` type
 * policy merges it by seq, and the timeline on screen re-reads it.
 */
export async function fetchNewEvents(query: AnyQuery, client: ApolloClient): Promise<void> {
  const id = (query.variables as { id?: unknown }).id;
  const current = query.getCurrentResult();
  if (typeof id !== "string" || current.error || !current.data) {
    await query.refetch(); // nothing sound to build on: ask for the whole first page again
    return;
  }
  for (let pages = 0; pages < 20; pages++) {
    const held = client.cache.readQuery({ query: RUN_TIMELINE, variables: { id, after: 0 } });
    const result = await client.query({
      query: RUN_TIMELINE,
      variables: { id, after: lastSeq(held) },
      fetchPolicy: "network-only",
    });
    // read back merged (the `events` type policy): what this page added is the difference
    const added = (result.data?.run?.events.length ?? 0) - (held?.run?.events.length ?? 0);
    if (added < EVENTS_PAGE) return;
  }
}

/** The same for a run's steps list: the steps after the last one the cache holds, page by page. */
export async function fetchNewSteps(query: AnyQuery, client: ApolloClient): Promise<void> {
  const id = (query.variables as { id?: unknown }).id;
  const current = query.getCurrentResult();
  if (typeof id !== "string" || current.error || !current.data) {
    await query.refetch();
    return;
  }
  for (let pages = 0; pages < 20; pages++) {
    const held = client.cache.readQuery({ query: RUN_STEPS, variables: { id, after: 0 } });
    const result = await client.query({
      query: RUN_STEPS,
      variables: { id, after: lastStepSeq(held) },
      fetchPolicy: "network-only",
    });
    const added = (result.data?.run?.steps.length ?? 0) - (held?.run?.steps.length ?? 0);
    if (added < STEPS_PAGE) return;
  }
}
