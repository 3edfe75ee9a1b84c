/**
 * The pure part of the run page's Tree tab: whether a run has a tree to show, its children's
 * counts in the app's status order, the path from the root, and the address of a page of
 * children (`?tab=tree&children=<cursor>`: a page is an address, like the runs list's).
 */

import type { RunStatus } from "../../api/types";
import { RUN_STATUSES } from "../../api/types";

export interface StatusCount {
  status: RunStatus;
  count: number;
}

export interface TreeRun {
  id: string;
  parentId: string | null;
  rootId: string;
  ancestors: readonly { id: string }[];
  childCounts: readonly StatusCount[];
}

/** The address parameter that holds the cursor of the page of children shown. */
export const CHILDREN_PARAM = "children";
const FROM_PARAM = "from";

/** Whether a run is part of a tree: it has a parent or children. */
export function hasTree(run: TreeRun | null | undefined): boolean {
  return !!run && (run.parentId !== null || run.childCounts.some((c) => c.count > 0));
}

/** How many children it has, whatever their status. */
export function childTotal(counts: readonly StatusCount[]): number {
  return counts.reduce((sum, c) => sum + c.count, 0);
}

/** The counts in the app's status order (live ones first), statuses with none left out. */
export function orderedCounts(counts: readonly StatusCount[]): StatusCount[] {
  const rank = (s: RunStatus) => {
    const i = RUN_STATUSES.indexOf(s);
    return i < 0 ? RUN_STATUSES.length : i;
  };
  return counts.filter((c) => c.count > 0).sort((a, b) => rank(a.status) - rank(b.status));
}

/**
 * Whether the path from the root is cut short: a child whose ancestors do not reach its root
 * (retention deleted a run above it, which unlinks its children).
 */
export function isPathCut(run: TreeRun): boolean {
  if (run.parentId === null) return false;
  return run.ancestors.length === 0 || run.ancestors[0]!.id !== run.rootId;
}

/** The cursor of the page of children the address asks for (null: the first page). */
export function childrenAfter(params: URLSearchParams): string | null {
  return params.get(CHILDREN_PARAM) || null;
}

/** How many children come before the page shown (`from`, carried with the page's cursor). */
export function childrenFrom(params: URLSearchParams): number {
  const from = Number(params.get(FROM_PARAM) ?? "0");
  return Number.isInteger(from) && from > 0 ? from : 0;
}

/**
 * The address of a page of children on the run page at `path` (null: the first page); `from`:
 * how many children come before it, for the rows' "child 21 of 40".
 */
export function childrenHref(path: string, params: URLSearchParams, after: string | null, from = 0): string {
  const next = new URLSearchParams(params);
  next.set("tab", "tree");
  if (after) next.set(CHILDREN_PARAM, after);
  else next.delete(CHILDREN_PARAM);
  if (after && from > 0) next.set(FROM_PARAM, String(from));
  else next.delete(FROM_PARAM);
  return `${path}?${next.toString()}`;
}

/** A child's place among its parent's children, in words: "child 5 of 6" (oldest first). */
export function childLabel(position: number, total: number): string {
  return position <= total ? `child ${position} of ${total}` : `child ${position}`;
}

/** The page of a run of the tree, open on its Tree tab: following a link walks the tree. */
export function treeHref(id: string): string {
  return `/runs/${id}?tab=tree`;
}
