import type { Agent } from "../../api/types";
import { useDebounced } from "./draft";
import { KeyHolder } from "./KeyHolder";
import { type Draft, MAX_KEY, parseTags, STRATEGIES, strategyLabel } from "./startOptions";

type Update = (change: Partial<Draft>) => void;

/**
 * Key, On conflict and Tags (docs/keys.md): what the start is given beside the input. Once a key
 * is typed, the run that holds it shows below, with what Start run will do about it.
 */
export function KeyFields({ agent, draft, update }: { agent: Agent; draft: Draft; update: Update }) {
  const typedKey = useDebounced(draft.key);
  return (
    <fieldset className="key-options">
      <legend>Key and tags</legend>
      <div className="field">
        <label htmlFor="start-key">Key</label>
        <input
          id="start-key"
          type="text"
          value={draft.key}
          maxLength={MAX_KEY}
          aria-describedby="start-key-hint"
          onChange={(e) => update({ key: e.target.value })}
        />
        <p className="hint" id="start-key-hint">
          One active run per key: runs of one key run one at a time. Empty:{" "}
          {agent.keyed
            ? `${agent.name} derives the key from the input.`
            : `the agent's default key (one ${agent.name} run at a time).`}
        </p>
      </div>
      {typedKey !== "" && typedKey === draft.key && (
        <KeyHolder agent={agent.name} runKey={typedKey} strategy={draft.onConflict || agent.onConflict} />
      )}
      <StrategySelect agent={agent} value={draft.onConflict} update={update} />
      <TagsInput value={draft.tags} update={update} />
    </fieldset>
  );
}

function StrategySelect({ agent, value, update }: { agent: Agent; value: Draft["onConflict"]; update: Update }) {
  return (
    <div className="field">
      <label htmlFor="start-on-conflict">On conflict</label>
      <select
        id="start-on-conflict"
        value={value}
        aria-describedby="start-on-conflict-hint"
        onChange={(e) => update({ onConflict: e.target.value as Draft["onConflict"] })}
      >
        <option value="">Agent's default ({strategyLabel(agent.onConflict)})</option>
        {STRATEGIES.map((s) => (
          <option key={s.value} value={s.value}>
            {s.label}
          </option>
        ))}
      </select>
      <p className="hint" id="start-on-conflict-hint">
        What Start run does when the key already has an active run.
      </p>
    </div>
  );
}

/** Tags as typed; checked as they are typed (the same rule as the server's). */
function TagsInput({ value, update }: { value: string; update: Update }) {
  const tags = parseTags(value);
  return (
    <div className="field">
      <label htmlFor="start-tags">Tags</label>
      <input
        id="start-tags"
        type="text"
        value={value}
        aria-invalid={tags.ok ? undefined : true}
        aria-describedby={tags.ok ? "start-tags-hint" : "start-tags-hint start-tags-error"}
        onChange={(e) => update({ tags: e.target.value })}
      />
      <p className="hint" id="start-tags-hint">
        At most 10, separated by spaces or commas; each 1 to 64 of A-Z a-z 0-9 : _ . @ / -
      </p>
      {!tags.ok && (
        <p className="field-error" id="start-tags-error" role="alert">
          {tags.error}
        </p>
      )}
    </div>
  );
}
