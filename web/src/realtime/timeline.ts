import type { RunTimelineData } from "../api/documents/runs";
import { EVENTS_PAGE } from "../api/documents/runs";
import type { AnyQuery } from "./refresh";

/** The last seq a timeline query holds (0 when it holds none). */
export function lastSeq(data: RunTimelineData | undefined): number {
  const events = data?.run?.events ?? [];
  return events.length ? events[events.length - 1]!.seq : 0;
}

/**
 * Asks the API for the events after the last one the timeline holds, page by page until a page
 * is not full. The `events` type policy merges them by seq.
 */
export async function fetchNewEvents(query: AnyQuery): Promise<void> {
  const current = query.getCurrentResult();
  if (current.error || !current.data) {
    await query.refetch(); // nothing sound to build on: ask for the whole first page again
    return;
  }
  for (let pages = 0; pages < 20; pages++) {
    const after = lastSeq(query.getCurrentResult().data as RunTimelineData | undefined);
    const result = await query.fetchMore({ variables: { after } });
    const page = (result.data as RunTimelineData | undefined)?.run?.events ?? [];
    if (page.length < EVENTS_PAGE) return;
  }
}
