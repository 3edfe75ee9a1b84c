/**
 * A parent's children on its waterfall (pure, so it is tested without a browser): each child a
 * bar on the parent's time scale, from its creation (queued until it started) to its settle (or
 * now), under the attempt of the parent that started it: the last attempt begun at or before the
 * child's creation (a child is created by `ctx.map` inside an attempt, which then parks to wait).
 */
import type { Band } from "./waterfall";

export interface ChildLike {
  id: string;
  agent: string;
  status: string;
  createdAt: string;
  startedAt?: string | null;
  finishedAt?: string | null;
}

export interface ChildBar {
  child: ChildLike;
  /** its place among the children, oldest first, from 1 */
  position: number;
  /** ms from the parent's creation */
  offset: number;
  /** ms it waited in the queue (null: not started yet) */
  queued: number | null;
  /** ms from its creation to its settle (or now) */
  duration: number;
}

/** The bars of `children` (oldest first, the first page), by the band of the attempt they belong under. */
export function childBars(
  children: readonly ChildLike[],
  parent: { createdAt: string },
  bands: readonly Band[],
  now: number = Date.now(),
): Map<Band, ChildBar[]> {
  const t0 = new Date(parent.createdAt).getTime();
  const byBand = new Map<Band, ChildBar[]>(); // an attempt resumed after a wait has two bands
  children.forEach((child, index) => {
    const created = new Date(child.createdAt).getTime();
    const offset = Math.max(0, created - t0);
    const started = child.startedAt ? new Date(child.startedAt).getTime() : null;
    const end = child.finishedAt ? new Date(child.finishedAt).getTime() : now;
    const band = [...bands].reverse().find((b) => b.offset <= offset) ?? bands[0];
    if (!band) return;
    const bars = byBand.get(band) ?? [];
    bars.push({
      child,
      position: index + 1,
      offset,
      queued: started === null ? null : Math.max(0, started - created),
      duration: Math.max(0, end - created),
    });
    byBand.set(band, bars);
  });
  return byBand;
}
