import { type FormEvent, useEffect, useState } from "react";
import { RUN_STATUSES } from "../../api/types";
import { navigate } from "../../app/router";
import { StatusBadge } from "../../ui/common";
import { isoOrNull, isFiltered, listUrl, NO_FILTERS, type RunFilters, toLocalInput } from "../runFilters";

type Go = (change: Partial<RunFilters>) => void;

/** The runs list's filters, folded away on a phone unless one is on; each change is a new URL. */
export function RunsFilters({
  filters,
  agents,
  narrow,
  go,
}: {
  filters: RunFilters;
  agents: readonly { name: string }[];
  narrow: boolean;
  go: Go;
}) {
  const on = isFiltered(filters);
  return (
    <details className="filters-fold" open={!narrow || on}>
      <summary>Filters{on ? " (on)" : ""}</summary>
      <div className="filters">
        <StatusChecks status={filters.status} go={go} />
        <AgentSelect agent={filters.agent} agents={agents} go={go} />
        <div className="field">
          <label htmlFor="runs-from">Created from</label>
          <input
            id="runs-from"
            type="datetime-local"
            value={toLocalInput(filters.from)}
            onChange={(e) => go({ from: isoOrNull(e.target.value) })}
          />
        </div>
        <div className="field">
          <label htmlFor="runs-to">Created before</label>
          <input
            id="runs-to"
            type="datetime-local"
            value={toLocalInput(filters.to)}
            onChange={(e) => go({ to: isoOrNull(e.target.value) })}
          />
        </div>
        <KeyTagsFilter filters={filters} go={go} />
        {on && (
          <button type="button" className="quiet" onClick={() => navigate(listUrl({ ...NO_FILTERS, size: filters.size }))}>
            Clear filters
          </button>
        )}
      </div>
    </details>
  );
}

function StatusChecks({ status, go }: { status: RunFilters["status"]; go: Go }) {
  return (
    <fieldset className="checks status-filter">
      <legend>Status</legend>
      {RUN_STATUSES.map((s) => (
        <label key={s} className="check">
          <input
            type="checkbox"
            name="status"
            value={s}
            checked={status.includes(s)}
            onChange={(e) => go({ status: e.target.checked ? [...status, s] : status.filter((x) => x !== s) })}
          />
          <StatusBadge status={s} />
        </label>
      ))}
    </fieldset>
  );
}

function AgentSelect({ agent, agents, go }: { agent: string | null; agents: readonly { name: string }[]; go: Go }) {
  return (
    <div className="field">
      <label htmlFor="runs-agent">Agent</label>
      <select id="runs-agent" value={agent ?? ""} onChange={(e) => go({ agent: e.target.value || null })}>
        <option value="">Any agent</option>
        {agents.map((a) => (
          <option key={a.name} value={a.name}>
            {a.name}
          </option>
        ))}
        {agent && !agents.some((a) => a.name === agent) && <option value={agent}>{agent}</option>}
      </select>
    </div>
  );
}

/**
 * Key and tags: typed, then applied with Filter (or Enter), so that a key is not asked for at
 * every keystroke; what the URL says shows in the inputs.
 */
function KeyTagsFilter({ filters, go }: { filters: RunFilters; go: Go }) {
  const [key, setKey] = useState(filters.key ?? "");
  const [tags, setTags] = useState(filters.tags.join(" "));
  useEffect(() => setKey(filters.key ?? ""), [filters.key]);
  const shownTags = filters.tags.join(" ");
  useEffect(() => setTags(shownTags), [shownTags]);
  const apply = (event: FormEvent) => {
    event.preventDefault();
    go({ key: key || null, tags: [...new Set(tags.split(/[\s,]+/).filter(Boolean))] });
  };
  return (
    <form className="filters filters-inner" aria-label="Filter by key and tags" onSubmit={apply}>
      <div className="field">
        <label htmlFor="runs-key">Key</label>
        <input id="runs-key" type="text" value={key} maxLength={200} onChange={(e) => setKey(e.target.value)} />
      </div>
      <div className="field">
        <label htmlFor="runs-tags">Tags</label>
        <input
          id="runs-tags"
          type="text"
          value={tags}
          aria-describedby="runs-tags-hint"
          onChange={(e) => setTags(e.target.value)}
        />
        <p className="hint" id="runs-tags-hint">
          Runs carrying all of them
        </p>
      </div>
      <button type="submit">Filter</button>
    </form>
  );
}

/** "Hide children" / "Show children": child runs (ctx.call, ctx.spawn, ctx.map) in the list or not. */
export function ChildrenToggle({ topLevel, go }: { topLevel: boolean; go: Go }) {
  return (
    <button type="button" onClick={() => go({ topLevel: !topLevel })}>
      {topLevel ? "Show children" : "Hide children"}
    </button>
  );
}
