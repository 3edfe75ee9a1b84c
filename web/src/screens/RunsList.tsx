import { useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useMemo, useState } from "react";
import { RUNS } from "../api/documents/runs";
import { AGENTS } from "../api/documents/viewer";
import { Link, navigate, useLocation } from "../app/router";
import {
  emptyText,
  filtersFromParams,
  listUrl,
  PAGE_SIZES,
  readSearch,
  type RunFilters,
  runsVariables,
  totalText,
} from "./runFilters";
import { BulkBar, type Ticked } from "./runs/Bulk";
import { ActOnMatching } from "./runs/ByFilter";
import { ChildrenToggle, RunsFilters } from "./runs/Filters";
import { Pager, RunsTable, type Ticks } from "./runs/Table";
import { ErrorNote, Loading } from "../ui/common";
import { useNarrow } from "../ui/narrow";


/** The ticked rows: ids, unticked all when the page or the filters change (a new URL). */
function useTicks(url: string): { ticks: Ticks; ids: ReadonlySet<string>; clear: () => void } {
  const [ids, setIds] = useState<ReadonlySet<string>>(new Set());
  useEffect(() => setIds(new Set()), [url]);
  const ticks = useMemo<Ticks>(
    () => ({
      has: (id) => ids.has(id),
      toggle: (id) =>
        setIds((old) => {
          const next = new Set(old);
          if (!next.delete(id)) next.add(id);
          return next;
        }),
      setAll: (all, on) =>
        setIds((old) => {
          const next = new Set(old);
          for (const id of all) {
            if (on) next.add(id);
            else next.delete(id);
          }
          return next;
        }),
    }),
    [ids],
  );
  return { ticks, ids, clear: () => setIds(new Set()) };
}

/** Newest (or oldest) first, filtered by status (several), agent, time range, key, tags and
 * whether child runs show, paged by cursor, 20, 50 or 100 a page, with the total counted (up to
 * "1,000+"); the URL holds it all. Rows can be ticked for bulk cancel, retry and replay; every run
 * the filters match (on every page) can be cancelled or replayed at once, counted first. */
export function RunsList() {
  const { params } = useLocation();
  const narrow = useNarrow();
  const filters = filtersFromParams(params);
  const { data, error, loading } = useQuery(RUNS, { variables: runsVariables(filters) });
  const { ticks, ids, clear } = useTicks(listUrl(filters));
  const agents = useQuery(AGENTS).data?.agents ?? [];
  useEffect(() => {
    document.title = "Runs · Outlive";
  }, []);
  const go = (change: Partial<RunFilters>) => navigate(listUrl({ ...filters, after: null, ...change }));
  const edges = data?.runs.edges ?? [];
  const total = data?.runs.totalCount ?? null;
  // the ticked runs as the page now shows them (a nudge may have moved their status on)
  const ticked: Ticked[] = edges.filter((e) => ids.has(e.node.id)).map((e) => ({ id: e.node.id, status: e.node.status }));

  return (
    <section aria-labelledby="runs-heading">
      <div className="section-head">
        <h1 id="runs-heading">Runs</h1>
        <div className="toolbar">
          <ChildrenToggle topLevel={filters.topLevel} go={go} />
          <Link to={`/replays${filters.agent ? `?agent=${encodeURIComponent(filters.agent)}` : ""}`} className="button">
            Replay failed runs…
          </Link>
          <Link to="/runs/new" className="button primary">
            Start a run
          </Link>
        </div>
      </div>
      <RunSearch filters={filters} go={go} />
      <RunsFilters filters={filters} agents={agents} narrow={narrow} go={go} />
      <ActOnMatching filters={{ ...filters, after: null }} />
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && edges.length === 0 && (
        <p className="empty">
          {emptyText(filters)} <Link to="/runs/new">Start one</Link>.
        </p>
      )}
      {total !== null && edges.length > 0 && (
        <p className="list-total muted" data-testid="runs-total">
          {totalText(total)}
        </p>
      )}
      <BulkBar key={listUrl(filters)} ticked={ticked} clear={clear} />
      {edges.length > 0 && <RunsTable edges={edges} filters={filters} go={go} ticks={ticks} />}
      <div className="list-foot">
        <Pager
          filters={filters}
          endCursor={data?.runs.pageInfo.endCursor ?? null}
          hasNextPage={data?.runs.pageInfo.hasNextPage ?? false}
        />
        <div className="field page-size">
          <label htmlFor="runs-page-size">Runs per page</label>
          <select id="runs-page-size" value={filters.size} onChange={(e) => go({ size: Number(e.target.value) })}>
            {PAGE_SIZES.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </div>
      </div>
    </section>
  );
}

/**
 * One search line: a run by its id or the start of it (the short id the console shows), or the
 * runs of a key (`key:…`) or a tag (`tag:…`, `#…`); the other filters are folded below it.
 */
function RunSearch({ filters, go }: { filters: RunFilters; go: (change: Partial<RunFilters>) => void }) {
  const [search, setSearch] = useState("");
  const [searchError, setSearchError] = useState<string | null>(null);
  const onSearch = (event: FormEvent) => {
    event.preventDefault();
    const read = readSearch(search);
    if ("error" in read) {
      setSearchError(read.error);
      return;
    }
    setSearchError(null);
    if ("run" in read) navigate(`/runs/${read.run}`); // a short id is looked up there (runsByIdPrefix)
    else if ("key" in read) go({ key: read.key });
    else if (!filters.tags.includes(read.tag)) go({ tags: [...filters.tags, read.tag] });
    setSearch("");
  };
  return (
    <form className="filters" role="search" aria-label="Find a run" onSubmit={onSearch}>
      <div className="field">
        <label htmlFor="run-search">Search runs</label>
        <input
          id="run-search"
          type="search"
          placeholder="run id, key:order-42, tag:vip"
          value={search}
          aria-invalid={searchError ? true : undefined}
          aria-describedby={searchError ? "run-search-error" : undefined}
          aria-keyshortcuts="/"
          onChange={(e) => setSearch(e.target.value)}
        />
        {searchError && (
          <p className="field-error" id="run-search-error">
            {searchError}
          </p>
        )}
      </div>
      <button type="submit">Open</button>
    </form>
  );
}
