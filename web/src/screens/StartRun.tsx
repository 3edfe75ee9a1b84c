import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useMemo, useState } from "react";
import { START_RUN } from "../api/documents/runs";
import { AGENTS } from "../api/documents/viewer";
import { describeError } from "../api/errors";
import { navigate, useLocation } from "../app/router";
import { CopyButton, ErrorNote, Loading } from "../ui/common";
import { asCurl, asGraphQL } from "../ui/copyAs";
import { SchemaForm } from "../ui/SchemaForm";
import { checkJson, fieldsOf, initialValues, toInput, type Values } from "../ui/schemaForm";

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
  const [jsonText, setJsonText] = useState("{}");
  const [jsonError, setJsonError] = useState<string | null>(null);
  const [startRun, started] = useMutation(START_RUN);
  // The form is the one state; the JSON editor shows it, and an edit there that passes the same
  // checks updates the form.
  const current = toInput(fields, values);
  const input = current.ok ? current.input : null;
  const setFromForm = (next: Values) => {
    setValues(next);
    const parsed = toInput(fields, next);
    if (parsed.ok) {
      setJsonText(JSON.stringify(parsed.input, null, 2));
      setJsonError(null);
      setErrors({}); // fixed: the errors of the last try go
    }
  };
  const onJson = (text: string) => {
    setJsonText(text);
    const checked = checkJson(fields, text);
    if (checked.ok) {
      setValues(checked.values);
      setErrors({});
      setJsonError(null);
    } else {
      setJsonError(checked.error);
    }
  };

  useEffect(() => {
    document.title = "Start a run · Outlive";
  }, []);
  useEffect(() => {
    const first = initialValues(fields);
    setValues(first);
    setErrors({});
    const parsed = toInput(fields, first);
    setJsonText(JSON.stringify(parsed.ok ? parsed.input : {}, null, 2));
    setJsonError(null);
  }, [fields]);

  const submit = async (event: FormEvent) => {
    event.preventDefault();
    if (!agent || jsonError) return;
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
    <section aria-labelledby="start-heading">
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
          <div className="columns">
            <fieldset>
              <legend>Input</legend>
              <SchemaForm
                idPrefix="input"
                fields={fields}
                values={values}
                errors={errors}
                onChange={(name, value) => setFromForm({ ...values, [name]: value })}
              />
            </fieldset>
            <div className="field">
              <label htmlFor="input-json">Input as JSON</label>
              <textarea
                id="input-json"
                className="mono json-editor"
                rows={10}
                spellCheck={false}
                value={jsonText}
                aria-invalid={jsonError ? true : undefined}
                aria-describedby={jsonError ? "input-json-error" : "input-json-hint"}
                onChange={(e) => onJson(e.target.value)}
              />
              {jsonError ? (
                <p className="field-error" id="input-json-error" role="alert">
                  {jsonError}
                </p>
              ) : (
                <p className="hint" id="input-json-hint">
                  Checked against the agent's schema as you type; the form follows.
                </p>
              )}
              {input && (
                <div className="actions">
                  <CopyButton value={asGraphQL(agent.name, input)} label="Copy as GraphQL" text="Copy as GraphQL" />
                  <CopyButton
                    value={asCurl(window.location.origin, agent.name, input)}
                    label="Copy as cURL"
                    text="Copy as cURL"
                  />
                </div>
              )}
            </div>
          </div>
          {started.error && (
            <p className="note note-error" role="alert">
              {describeError(started.error)}
            </p>
          )}
          <div className="actions">
            <button type="submit" className="primary" disabled={started.loading || Boolean(jsonError)}>
              Start run
            </button>
          </div>
        </form>
      )}
    </section>
  );
}
