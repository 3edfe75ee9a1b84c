/** The Events tab's reading of a timeline: the types it holds, filtered by type and text, a window at a time. */

export interface EventLike {
  seq: number;
  type: string;
}

/** How many rows the Events tab draws at first, and how many more each "Show more" adds. */
export const EVENTS_WINDOW = 200;

/** The event types present, each with its count, in the order first seen. */
export function eventTypes(events: readonly EventLike[]): { type: string; count: number }[] {
  const counts = new Map<string, number>();
  for (const e of events) counts.set(e.type, (counts.get(e.type) ?? 0) + 1);
  return [...counts].map(([type, count]) => ({ type, count }));
}

/**
 * The events of `type` ("" for all) whose type or data holds `text` (any case; "" for all), and
 * the first `shown` of them.
 */
export function windowEvents<T extends EventLike & { data?: unknown }>(
  events: readonly T[],
  type: string,
  shown: number,
  text = "",
): { matching: number; rows: readonly T[] } {
  const wanted = text.trim().toLowerCase();
  const matching = events.filter(
    (e) =>
      (!type || e.type === type) &&
      (!wanted || e.type.toLowerCase().includes(wanted) || JSON.stringify(e.data ?? null).toLowerCase().includes(wanted)),
  );
  return { matching: matching.length, rows: matching.slice(0, shown) };
}
