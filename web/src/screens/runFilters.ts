/** The runs list's filters and the URL that holds them (pure: tested without a browser). */

import type { RunOrder } from "../api/generated";
import { RUN_STATUSES, type RunStatus } from "../api/types";

export interface RunFilters {
  status: RunStatus[];
  agent: string | null;
  /** ISO 8601 (UTC) in the URL, so a shared link means the same moments in any time zone */
  from: string | null;
  to: string | null;
  /** by creation time; newest first unless the URL says `order=oldest` */
  order: RunOrder;
  after: string | null;
  /** exact; null: any key (the URL cannot ask for the default key "", the API can) */
  key: string | null;
  /** runs carrying all of them */
  tags: string[];
  /** only runs with no parent: `children=hide` */
  topLevel: boolean;
  /** runs per page, one of PAGE_SIZES: `size=50` (20 is not written) */
  size: number;
}

/** The page sizes the list offers; the first is the default. */
export const PAGE_SIZES = [20, 50, 100] as const;

export const NO_FILTERS: RunFilters = {
  status: [],
  agent: null,
  from: null,
  to: null,
  order: "NEWEST_FIRST",
  after: null,
  key: null,
  tags: [],
  topLevel: false,
  size: PAGE_SIZES[0],
};

export function isoOrNull(value: string | null): string | null {
  if (!value) return null;
  const t = new Date(value);
  return Number.isNaN(t.getTime()) ? null : t.toISOString();
}

/** An ISO time as a `datetime-local` input holds it (the person's zone, to the minute). */
export function toLocalInput(iso: string | null): string {
  if (!iso) return "";
  const d = new Date(iso);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/**
 * The filters a URL holds:
 * `?status=FAILED&status=CANCELLED&agent=demo&key=k&tag=a&tag=b&children=hide&order=oldest&size=50&after=<cursor>`.
 */
export function filtersFromParams(params: URLSearchParams): RunFilters {
  const status = [...new Set(params.getAll("status").flatMap((v) => v.split(",")))].filter((s): s is RunStatus =>
    RUN_STATUSES.includes(s as RunStatus),
  );
  return {
    status,
    agent: params.get("agent") || null,
    from: isoOrNull(params.get("from")),
    to: isoOrNull(params.get("to")),
    order: params.get("order") === "oldest" ? "OLDEST_FIRST" : "NEWEST_FIRST",
    after: params.get("after") || null,
    key: params.get("key") || null,
    tags: [...new Set(params.getAll("tag").flatMap((v) => v.split(",")))].filter(Boolean),
    topLevel: params.get("children") === "hide",
    size: pageSize(params.get("size")),
  };
}

/** A page size the list offers (anything else: the default). */
export function pageSize(value: string | null): number {
  const n = Number(value);
  return (PAGE_SIZES as readonly number[]).includes(n) ? n : PAGE_SIZES[0];
}

/** A total as a list says it: the API counts up to 1,001, and 1,001 means more than 1,000. */
export function countText(total: number, one: string, many: string): string {
  if (total > 1000) return `1,000+ ${many}`;
  return total === 1 ? `1 ${one}` : `${total.toLocaleString("en-US")} ${many}`;
}

/** The runs list's total, in words. */
export function totalText(total: number): string {
  return countText(total, "run", "runs");
}

export function listUrl(filters: RunFilters): string {
  const params = new URLSearchParams();
  for (const s of filters.status) params.append("status", s);
  if (filters.agent) params.set("agent", filters.agent);
  if (filters.from) params.set("from", filters.from);
  if (filters.to) params.set("to", filters.to);
  if (filters.key) params.set("key", filters.key);
  for (const t of filters.tags) params.append("tag", t);
  if (filters.topLevel) params.set("children", "hide");
  if (filters.order === "OLDEST_FIRST") params.set("order", "oldest");
  if (filters.size !== PAGE_SIZES[0]) params.set("size", String(filters.size));
  if (filters.after) params.set("after", filters.after);
  const query = params.toString();
  return query ? `/runs?${query}` : "/runs";
}

/** Whether the list shows less than every run (the filters fold opens; Clear filters shows). */
export function isFiltered(f: RunFilters): boolean {
  return f.status.length > 0 || Boolean(f.agent || f.from || f.to || f.key) || f.tags.length > 0 || f.topLevel;
}

/** What an empty list says, naming the filters that emptied it. */
export function emptyText(f: RunFilters): string {
  if (!isFiltered(f)) return "No runs yet.";
  const which = f.status.map((s) => s.toLowerCase()).join(" or ");
  const parts = [
    f.topLevel ? "top-level" : "",
    which,
    "runs",
    f.agent ? `of ${f.agent}` : "",
    f.key ? `with the key ${f.key}` : "",
    f.tags.length ? `tagged ${f.tags.join(" and ")}` : "",
    f.from || f.to ? "in that time range" : "",
  ];
  return `No ${parts.filter(Boolean).join(" ")}.`;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The start of a run id, as the console shows it: 4 to 32 hex digits (dashes ignored). */
export function isIdPrefix(value: string): boolean {
  const digits = value.trim().replace(/-/g, "");
  return /^[0-9a-f]{4,32}$/i.test(digits);
}

/**
 * The runs list's one search line: a run id or its start (opens the run), `key:<key>` (the runs
 * of that key) or `tag:<tag>` / `#<tag>` (the runs carrying it, with the tags already asked for).
 */
export function readSearch(
  text: string,
): { run: string } | { key: string } | { tag: string } | { error: string } {
  const value = text.trim();
  const lower = value.toLowerCase();
  if (lower.startsWith("key:")) {
    const key = value.slice(4).trim();
    return key ? { key } : { error: "Give the key after key:, such as key:order-42." };
  }
  if (lower.startsWith("tag:") || value.startsWith("#")) {
    const tag = value.slice(value.startsWith("#") ? 1 : 4).trim();
    return tag ? { tag } : { error: "Give the tag after tag:, such as tag:user:123." };
  }
  if (UUID.test(value) || isIdPrefix(value)) return { run: value.toLowerCase() };
  return { error: "A run id or its first 4 or more characters (such as 0b6c1f4e), key:… or tag:…" };
}

/** The variables of the Runs query (and of RunsCost, its rows' costs) for the filters the URL holds. */
export function runsVariables(f: RunFilters) {
  return {
    first: f.size,
    after: f.after,
    status: f.status.length ? f.status : null,
    agent: f.agent,
    createdSince: f.from,
    createdBefore: f.to,
    order: f.order,
    key: f.key,
    tags: f.tags.length ? f.tags : null,
    topLevel: f.topLevel,
  };
}
