import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useMemo, useState } from "react";
import { START_RUN } from "../api/documents/runs";
import { AGENTS } from "../api/documents/viewer";
import { activeRunOf, describeError } from "../api/errors";
import type { Agent } from "../api/types";
import { Link, navigate, useLocation } from "../app/router";
import { ErrorNote, Loading } from "../ui/common";
import { Words } from "../ui/Words";
import { fieldsOf, toInput, type Values } from "../ui/schemaForm";
import { forgetDraft, lastStartAgent, useStartDraft } from "./start/draft";
import { InputFields, useInputEditor } from "./start/InputFields";
import { KeyFields } from "./start/KeyFields";
import { checkKey, type Draft, parseTags } from "./start/startOptions";

/**
 * Start a run: pick an agent, fill the form its `inputSchema` describes, maybe a key, a strategy
 * and tags, press Start run. What was typed is kept per agent for the tab's life (start/draft.ts).
 */
export function StartRun() {
  const { params } = useLocation();
  const { data, error, loading } = useQuery(AGENTS);
  const agents = data?.agents ?? [];
  const [agentName, setAgentName] = useState(() => params.get("agent") ?? lastStartAgent() ?? "");
  const agent = agents.find((a) => a.name === agentName) ?? agents[0];
  useEffect(() => {
    document.title = "Start a run · Outlive";
  }, []);
  return (
    <section aria-labelledby="start-heading">
      <h1 id="start-heading">Start a run</h1>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && agents.length === 0 && <p className="empty">This server has no agents.</p>}
      {agent && <StartForm key={agent.name} agent={agent} agents={agents} onAgent={setAgentName} />}
    </section>
  );
}

/** The variables of startRun from the draft, or the errors that keep it from being sent. */
function startInput(agent: Agent, fields: ReturnType<typeof fieldsOf>, draft: Draft) {
  const parsed = toInput(fields, draft.values);
  const key = checkKey(draft.key);
  const tags = parseTags(draft.tags);
  if (!parsed.ok || !key.ok || !tags.ok) return { errors: parsed.ok ? {} : parsed.errors, input: null };
  const input = {
    agent: agent.name,
    input: parsed.input,
    key: key.value,
    onConflict: draft.onConflict || null,
    tags: tags.value.length ? tags.value : null,
  };
  return { errors: {}, input };
}

function StartForm({ agent, agents, onAgent }: { agent: Agent; agents: readonly Agent[]; onAgent: (name: string) => void }) {
  const fields = useMemo(() => fieldsOf(agent.inputSchema), [agent]);
  const [draft, update] = useStartDraft(agent.name, fields);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const editor = useInputEditor(fields, draft.values, (values: Values) => update({ values }), () => setErrors({}));
  const [startRun, started] = useMutation(START_RUN);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (editor.jsonError) return;
    const { errors: found, input } = startInput(agent, fields, draft);
    setErrors(found);
    if (!input) return;
    try {
      const payload = (await startRun({ variables: { input } })).data?.startRun;
      if (!payload) return;
      forgetDraft(agent.name);
      const signalled = (input.onConflict ?? agent.onConflict) === "SIGNAL_EXISTING";
      navigate(`/runs/${payload.run.id}${payload.created ? "" : signalled ? "?existing=signal" : "?existing=1"}`);
    } catch {
      // shown below from `started.error`; the form keeps what was typed
    }
  };

  return (
    <form onSubmit={submit} noValidate aria-label="Start a run">
      <div className="field">
        <label htmlFor="agent">Agent</label>
        <select id="agent" name="agent" value={agent.name} onChange={(e) => onAgent(e.target.value)}>
          {agents.map((a) => (
            <option key={a.name} value={a.name}>
              {a.name}
            </option>
          ))}
        </select>
        <p className="hint" data-testid="agent-description">
          <Words text={agent.description} />
        </p>
      </div>
      <KeyFields agent={agent} draft={draft} update={update} />
      <InputFields agent={agent.name} fields={fields} values={draft.values} errors={errors} editor={editor} />
      {started.error && <StartError error={started.error} />}
      <div className="actions">
        <button type="submit" className="primary" disabled={started.loading || Boolean(editor.jsonError)}>
          Start run
        </button>
      </div>
    </form>
  );
}

/** Why the start was refused; RUN_ACTIVE (REJECT) names the key's active run. */
function StartError({ error }: { error: unknown }) {
  const active = activeRunOf(error);
  return (
    <p className="note note-error" role="alert">
      {describeError(error)}
      {active && (
        <>
          {" "}
          <Link to={`/runs/${active}`}>Open the active run</Link>
        </>
      )}
    </p>
  );
}
