import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import {
  CREATE_WEBHOOK_ENDPOINT,
  DELETE_WEBHOOK_ENDPOINT,
  WEBHOOK_ENDPOINTS,
  WEBHOOK_EVENTS,
} from "../api/documents/webhooks";
import { describeError, isUnavailable } from "../api/errors";
import type { WebhookEndpoint } from "../api/types";
import { ErrorNote, Loading } from "../ui/common";
import { formatTime } from "../ui/format";
import { isLoopbackRefusal } from "../ui/destinations";
import { EndpointDeliveries } from "./WebhookDeliveries";

/** Endpoints, their recent deliveries (live on webhook.delivery.updated), create and delete. */
export function Webhooks() {
  const { data, error, loading } = useQuery(WEBHOOK_ENDPOINTS);
  const [secret, setSecret] = useState<{ url: string; secret: string } | null>(null);
  useEffect(() => {
    document.title = "Webhooks · Outlive";
  }, []);

  if (error && isUnavailable(error)) {
    return (
      <section aria-labelledby="webhooks-heading">
        <h1 id="webhooks-heading">Webhooks</h1>
        <ErrorNote error={error} what="webhooks" />
      </section>
    );
  }
  const endpoints = data?.webhookEndpoints ?? [];
  return (
    <section aria-labelledby="webhooks-heading">
      <h1 id="webhooks-heading">Webhooks</h1>
      <p className="muted">
        When a run settles, Outlive POSTs a signed event (Standard Webhooks) to each endpoint that
        asked for it.
      </p>
      <CreateEndpoint onCreated={setSecret} />
      {secret && <SecretOnce {...secret} onDone={() => setSecret(null)} />}
      {error && <ErrorNote error={error} />}
      {!data && loading && <Loading />}
      {data && endpoints.length === 0 && <p className="empty">No endpoints yet.</p>}
      {endpoints.map((endpoint) => (
        <Endpoint key={endpoint.id} endpoint={endpoint} />
      ))}
    </section>
  );
}

function CreateEndpoint({ onCreated }: { onCreated: (s: { url: string; secret: string }) => void }) {
  const [url, setUrl] = useState("");
  const [events, setEvents] = useState<string[]>([]);
  const [create, { loading, error }] = useMutation(CREATE_WEBHOOK_ENDPOINT, {
    refetchQueries: ["WebhookEndpoints"],
  });
  const submit = async (event: FormEvent) => {
    event.preventDefault();
    try {
      const result = await create({ variables: { url: url.trim(), events: events.length ? events : null } });
      const payload = result.data?.createWebhookEndpoint;
      if (payload) {
        onCreated({ url: payload.endpoint.url, secret: payload.secret });
        setUrl("");
        setEvents([]);
      }
    } catch {
      // shown below
    }
  };
  return (
    <form className="card" onSubmit={submit} aria-label="Add an endpoint">
      <h2>Add an endpoint</h2>
      <div className="field">
        <label htmlFor="webhook-url">Endpoint URL</label>
        <input
          id="webhook-url"
          type="url"
          required
          placeholder="https://example.com/outlive"
          value={url}
          onChange={(e) => setUrl(e.target.value)}
        />
      </div>
      <fieldset className="checks">
        <legend>Events (none ticked: all of them)</legend>
        {WEBHOOK_EVENTS.map((name) => (
          <label key={name} className="check">
            <input
              type="checkbox"
              checked={events.includes(name)}
              onChange={(e) =>
                setEvents((current) => (e.target.checked ? [...current, name] : current.filter((n) => n !== name)))
              }
            />
            <code>{name}</code>
          </label>
        ))}
      </fieldset>
      {error && (
        <p className="note note-error" role="alert">
          {describeError(error)}
          {isLoopbackRefusal(url, describeError(error)) && (
            <span className="hint" data-testid="loopback-hint">
              {" "}
              Outlive refuses private and loopback addresses (SSRF). For a receiver on this machine during
              development, start the server with <code>OUTLIVE_WEBHOOK_ALLOW_PRIVATE=1</code>.
            </span>
          )}
        </p>
      )}
      <div className="actions">
        <button type="submit" className="primary" disabled={loading || !url.trim()}>
          Create endpoint
        </button>
      </div>
    </form>
  );
}

function SecretOnce({ url, secret, onDone }: { url: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="card secret" role="alertdialog" aria-labelledby="secret-heading" aria-describedby="secret-help">
      <h2 id="secret-heading">Signing secret for {url}</h2>
      <p id="secret-help">
        Copy it now: it is shown once and cannot be read again. Verify each delivery's
        <code> webhook-signature</code> with it.
      </p>
      <p>
        <code className="secret-value" aria-label="Signing secret">
          {secret}
        </code>
      </p>
      <div className="actions">
        <button
          type="button"
          onClick={() =>
            void navigator.clipboard?.writeText(secret).then(
              () => setCopied(true),
              () => setCopied(false),
            )
          }
        >
          {copied ? "Copied" : "Copy secret"}
        </button>
        <button type="button" onClick={onDone}>
          I have stored it
        </button>
      </div>
    </div>
  );
}

function Endpoint({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [remove, { loading, error }] = useMutation(DELETE_WEBHOOK_ENDPOINT, {
    refetchQueries: ["WebhookEndpoints"],
  });
  const onDelete = () => {
    if (window.confirm(`Delete the endpoint ${endpoint.url}? Deliveries to it stop.`)) {
      void remove({ variables: { id: endpoint.id } }).catch(() => undefined);
    }
  };
  return (
    <article className="card" aria-label={`Endpoint ${endpoint.url}`}>
      <div className="section-head">
        <h2 className="mono small-heading">{endpoint.url}</h2>
        <button type="button" className="danger" onClick={onDelete} disabled={loading} aria-label={`Delete endpoint ${endpoint.url}`}>
          Delete
        </button>
      </div>
      <p className="muted small">
        {endpoint.events.length ? endpoint.events.join(", ") : "all events"} · added {formatTime(endpoint.createdAt)}
      </p>
      {error && (
        <p className="note note-error" role="alert">
          {describeError(error)}
        </p>
      )}
      <EndpointDeliveries endpoint={endpoint} />
    </article>
  );
}
