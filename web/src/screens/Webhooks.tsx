import { useMutation, useQuery } from "@apollo/client/react";
import { type FormEvent, useEffect, useState } from "react";
import {
  CREATE_WEBHOOK_ENDPOINT,
  DELETE_WEBHOOK_ENDPOINT,
  REDELIVER_WEBHOOK,
  WEBHOOK_ENDPOINTS,
  WEBHOOK_EVENTS,
} from "../api/documents/webhooks";
import { describeError, isUnavailable } from "../api/errors";
import type { WebhookDelivery, WebhookEndpoint } from "../api/types";
import { CopyButton, ErrorNote, Loading, StatusBadge, When } from "../ui/common";
import { formatTime } from "../ui/format";
import { isLoopbackRefusal } from "../ui/destinations";

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
      {endpoint.deliveries.length === 0 ? (
        <p className="muted">No deliveries yet.</p>
      ) : (
        <div className="table-wrap">
          <table className="table" aria-label={`Deliveries to ${endpoint.url}`}>
            <thead>
              <tr>
                <th scope="col">Event</th>
                <th scope="col">Status</th>
                <th scope="col">Attempts</th>
                <th scope="col">Response</th>
                <th scope="col">Last error</th>
                <th scope="col">Created</th>
                <th scope="col">Delivered</th>
                <th scope="col">
                  <span className="visually-hidden">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {endpoint.deliveries.map((d) => (
                <DeliveryRow key={d.id} delivery={d} />
              ))}
            </tbody>
          </table>
        </div>
      )}
    </article>
  );
}

/** One delivery: what happened, and Redeliver once it is delivered or failed (same webhook-id). */
function DeliveryRow({ delivery: d }: { delivery: WebhookDelivery }) {
  // The answer is a delivery: the normalized cache updates this row; the nudges that follow
  // (webhook.delivery.updated) re-query the endpoints as the delivery moves on.
  const [redeliver, { loading, error }] = useMutation(REDELIVER_WEBHOOK);
  return (
    <tr data-delivery-id={d.id}>
      <td>
        <code>{d.eventType}</code>
      </td>
      <td>
        <StatusBadge status={d.status} testId="delivery-status" />
      </td>
      <td data-testid="delivery-attempts">{d.attempts}</td>
      <td data-testid="delivery-response">{d.responseStatus ?? "—"}</td>
      <td className="small">{d.lastError ?? <span className="muted">—</span>}</td>
      <td>
        <When iso={d.createdAt} />
      </td>
      <td>
        <When iso={d.deliveredAt} relative={false} />
      </td>
      <td>
        <button
          type="button"
          disabled={loading || d.status === "PENDING"}
          title={d.status === "PENDING" ? "Still being delivered" : "Send it again, with the same webhook-id"}
          aria-label={`Redeliver ${d.eventType} delivery ${d.id.slice(0, 8)}`}
          onClick={() => void redeliver({ variables: { deliveryId: d.id } }).catch(() => undefined)}
        >
          Redeliver
        </button>{" "}
        <CopyButton value={d.id} label={`Copy delivery id ${d.id.slice(0, 8)}`} />
        {error && (
          <span className="field-error" role="alert">
            {describeError(error)}
          </span>
        )}
      </td>
    </tr>
  );
}
