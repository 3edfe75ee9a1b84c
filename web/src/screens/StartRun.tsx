import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useMemo, useState } from "react";
import { START_RUN } from "../api/documents/runs";
import { AGENTS } from "../api/documents/viewer";
import { describeError } from "../api/errors";
import { navigate, useLocation } from "../app/router";
import { ErrorNote, Loading } from "../ui/common";
import { SchemaForm } from "../ui/SchemaForm";
import { fieldsOf, initialValues, toInput, type Values } from "../ui/schemaForm";

/** Start a run: pick an agent, fill the form its `inputSchema` describes, press Start run. */
export function StartRun() {
  const { params } = useLocation();
  const { data, error, loading } = useQuery(AGENTS);
  const agents = data?.agents ?? [];
  const [agentName, setAgentName] = useState(params.get("agent") ?? "");
  const agent = agents.find((a) => a.name === agentName) ?? agents[0];
  const fields = useMemo(() => fieldsOf(agent?.inputSchema), [agent]);
  const [values, setValues] = useState<Values>({});
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [startRun, started] = useMutation(START_RUN);

  useEffect(() => {
    document.title = "Start a run · Outlive";
  }, []);
  useEffect(() => {
    setValues(initialValues(fields));
    setErrors({});
  }, [fields]);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (!agent) return;
    const parsed = toInput(fields, values);
    if (!parsed.ok) {
      setErrors(parsed.errors);
      return;
    }
    setErrors({});
    try {
      const result = await startRun({ variables: { input: { agent: agent.name, input: parsed.input } } });
      const payload = result.data?.startRun;
      if (payload) navigate(`/runs/${payload.run.id}${payload.created ? "" : "?existing=1"}`);
    } catch {
      // shown below from `started.error`
    }
  };

  return (
    <section aria-labelledby="start-heading" className="narrow">
      <h1 id="start-heading">Start a run</h1>
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && agents.length === 0 && <p className="empty">This server has no agents.</p>}
      {agent && (
        <form onSubmit={submit} noValidate aria-label="Start a run">
          <div className="field">
            <label htmlFor="agent">Agent</label>
            <select id="agent" name="agent" value={agent.name} onChange={(e) => setAgentName(e.target.value)}>
              {agents.map((a) => (
                <option key={a.name} value={a.name}>
                  {a.name}
                </option>
              ))}
            </select>
            <p className="hint">{agent.description}</p>
          </div>
          <fieldset>
            <legend>Input</legend>
            <SchemaForm
              idPrefix="input"
              fields={fields}
              values={values}
              errors={errors}
              onChange={(name, value) => setValues((v) => ({ ...v, [name]: value }))}
            />
          </fieldset>
          {started.error && (
            <p className="note note-error" role="alert">
              {describeError(started.error)}
            </p>
          )}
          <div className="actions">
            <button type="submit" className="primary" disabled={started.loading}>
              Start run
            </button>
          </div>
        </form>
      )}
    </section>
  );
}
