import { useLazyQuery, useMutation, useQuery } from "@apollo/client/react";
import { Fragment, useState } from "react";
import { Link } from "../app/router";
import {
  REDELIVER_FAILED_WEBHOOKS,
  RETRY_PENDING_WEBHOOK_DELIVERIES,
  REDELIVER_WEBHOOK,
  RETRY_WEBHOOK_DELIVERY,
  SEND_TEST_WEBHOOK,
  WEBHOOK_DELIVERY_ATTEMPTS,
  WEBHOOK_ENDPOINT_DELIVERIES,
} from "../api/documents/webhooks";
import { describeError } from "../api/errors";
import type { DeliveryStatus } from "../api/generated";
import type { WebhookDelivery, WebhookEndpoint } from "../api/types";
import { CopyButton, Loading, StatusBadge, When } from "../ui/common";
import { countText, PAGE_SIZES } from "./runFilters";

const STATUSES: DeliveryStatus[] = ["PENDING", "DELIVERED", "FAILED"];

/**
 * An endpoint's deliveries: the newest 20 (from the endpoints query) or, filtered by status or paged
 * back, its own query (`webhookEndpoint`); "Redeliver failed" counts them first, then asks.
 */
export function EndpointDeliveries({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [status, setStatus] = useState<DeliveryStatus | null>(null);
  const [pages, setPages] = useState<string[]>([]); // the `before` of each page gone back to
  const [size, setSize] = useState<number>(PAGE_SIZES[0]);
  const before = pages.at(-1) ?? null;
  const own = useQuery(WEBHOOK_ENDPOINT_DELIVERIES, {
    variables: { id: endpoint.id, status, before, first: size },
    skip: status === null && before === null && size === PAGE_SIZES[0],
  });
  const filtered = status !== null || before !== null || size !== PAGE_SIZES[0];
  const deliveries = filtered ? (own.data?.webhookEndpoint?.deliveries ?? null) : endpoint.deliveries;
  const which = status ? `${status.toLowerCase()} ` : "";
  const count = filtered ? (own.data?.webhookEndpoint?.deliveryCount ?? null) : endpoint.deliveryCount;
  const last = deliveries?.at(-1);
  const name = endpoint.url;
  return (
    <>
      <div className="filters delivery-filters">
        <div className="field">
          <label htmlFor={`delivery-status-${endpoint.id}`}>Delivery status</label>
          <select
            id={`delivery-status-${endpoint.id}`}
            value={status ?? ""}
            onChange={(e) => {
              setStatus((e.target.value || null) as DeliveryStatus | null);
              setPages([]);
            }}
          >
            <option value="">Any</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </div>
        <SendTest endpoint={endpoint} />
        <RetryPending endpoint={endpoint} />
        <RedeliverFailed endpoint={endpoint} />
      </div>
      {own.error && (
        <p className="note note-error" role="alert">
          {describeError(own.error)}
        </p>
      )}
      {count !== null && (
        <p className="list-total muted" data-testid="deliveries-total">
          {countText(count, `${which}delivery`, `${which}deliveries`)}
        </p>
      )}
      {deliveries === null ? (
        <Loading />
      ) : deliveries.length === 0 ? (
        <p className="muted">{filtered ? "No deliveries here." : "No deliveries yet."}</p>
      ) : (
        <DeliveriesTable name={name} deliveries={deliveries} />
      )}
      <div className="actions pager">
        {pages.length > 0 && (
          <button type="button" onClick={() => setPages((p) => p.slice(0, -1))}>
            Newer deliveries
          </button>
        )}
        {deliveries !== null && deliveries.length >= size && last && (
          <button type="button" onClick={() => setPages((p) => [...p, last.createdAt])}>
            Older deliveries
          </button>
        )}
        <div className="field page-size">
          <label htmlFor={`delivery-page-size-${endpoint.id}`}>Deliveries per page</label>
          <select
            id={`delivery-page-size-${endpoint.id}`}
            value={size}
            onChange={(e) => {
              setSize(Number(e.target.value));
              setPages([]);
            }}
          >
            {PAGE_SIZES.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </div>
      </div>
    </>
  );
}

function DeliveriesTable({ name, deliveries }: { name: string; deliveries: WebhookDelivery[] }) {
  return (
    <div className="table-wrap">
      <table className="table cards-narrow" aria-label={`Deliveries to ${name}`}>
        <thead>
          <tr>
            <th scope="col">Event</th>
            <th scope="col">Run</th>
            <th scope="col">Status</th>
            <th scope="col">Attempts</th>
            <th scope="col">Response</th>
            <th scope="col">Last error</th>
            <th scope="col">Next attempt</th>
            <th scope="col">Created</th>
            <th scope="col">Delivered</th>
            <th scope="col">
              <span className="visually-hidden">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {deliveries.map((d) => (
            <DeliveryRow key={d.id} delivery={d} />
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A `webhook.test` event to the endpoint; it shows among the deliveries as it is sent. */
function SendTest({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [send, { data, loading, error }] = useMutation(SEND_TEST_WEBHOOK, {
    refetchQueries: ["WebhookEndpoints"], // a filtered list follows its nudge
  });
  return (
    <div className="send-test" aria-live="polite">
      <button
        type="button"
        disabled={loading}
        aria-label={`Send test event to ${endpoint.url}`}
        onClick={() => void send({ variables: { endpointId: endpoint.id } }).catch(() => undefined)}
      >
        Send test event
      </button>
      {data && <span className="muted small"> Test event queued.</span>}
      {error && (
        <span className="field-error" role="alert">
          {describeError(error)}
        </span>
      )}
    </div>
  );
}

/**
 * Tries now every delivery of the endpoint that waits for the retry of a failed attempt (an
 * endpoint fixed after an outage need not wait out the backoff). Asks nothing: it only brings
 * forward what would be tried anyway.
 */
function RetryPending({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [retry, { data, loading, error }] = useMutation(RETRY_PENDING_WEBHOOK_DELIVERIES);
  const tried = data?.retryPendingWebhookDeliveries.count;
  return (
    <div className="bulk-redeliver" aria-live="polite">
      <button
        type="button"
        disabled={loading}
        aria-label={`Retry all pending now: deliveries to ${endpoint.url}`}
        onClick={() => void retry({ variables: { endpointId: endpoint.id } }).catch(() => undefined)}
      >
        Retry all pending now
      </button>
      {tried !== undefined && (
        <span data-testid="retry-pending-tried">
          {tried === 0 ? "No delivery was waiting for a retry." : tried === 1 ? "1 delivery tried now." : `${tried} deliveries tried now.`}
        </span>
      )}
      {error && (
        <span className="field-error" role="alert">
          {describeError(error)}
        </span>
      )}
    </div>
  );
}

/** Counts the endpoint's failed deliveries, asks, then sends them all again (same webhook-ids). */
function RedeliverFailed({ endpoint }: { endpoint: WebhookEndpoint }) {
  const [count, { data: counted, loading: counting }] = useLazyQuery(WEBHOOK_ENDPOINT_DELIVERIES, {
    fetchPolicy: "network-only",
  });
  const [asking, setAsking] = useState(false);
  const [redeliver, { data, loading, error, reset }] = useMutation(REDELIVER_FAILED_WEBHOOKS);
  const failed = counted?.webhookEndpoint?.deliveries.length ?? null;
  const start = () => {
    reset();
    setAsking(true);
    void count({ variables: { id: endpoint.id, status: "FAILED", first: 100 } });
  };
  const confirm = async () => {
    setAsking(false);
    await redeliver({ variables: { endpointId: endpoint.id } }).catch(() => undefined);
  };
  const sent = data?.redeliverFailedWebhooks.count;
  return (
    <div className="bulk-redeliver" aria-live="polite">
      {!asking && (
        <button type="button" onClick={start} disabled={loading} aria-label={`Redeliver failed deliveries to ${endpoint.url}`}>
          Redeliver failed
        </button>
      )}
      {asking && (counting || failed === null) && <Loading>Counting failed deliveries…</Loading>}
      {asking && failed === 0 && (
        <span>
          No failed deliveries.{" "}
          <button type="button" onClick={() => setAsking(false)}>
            Close
          </button>
        </span>
      )}
      {asking && failed !== null && failed > 0 && (
        <span data-testid="redeliver-failed-ask">
          Send {failed === 1 ? "1 failed delivery" : `${failed}${failed >= 100 ? "+" : ""} failed deliveries`} again?{" "}
          <button type="button" className="primary" onClick={() => void confirm()}>
            Redeliver {failed === 1 ? "it" : "them"}
          </button>{" "}
          <button type="button" onClick={() => setAsking(false)}>
            Keep them
          </button>
        </span>
      )}
      {sent !== undefined && <span data-testid="redeliver-failed-sent">{sent === 1 ? "1 delivery sent again." : `${sent} deliveries sent again.`}</span>}
      {error && (
        <span className="field-error" role="alert">
          {describeError(error)}
        </span>
      )}
    </div>
  );
}

/**
 * One delivery: what happened, which run it announces, when its next attempt is due with "Retry
 * now", and Redeliver once it is delivered or failed (same webhook-id).
 */
function DeliveryRow({ delivery: d }: { delivery: WebhookDelivery }) {
  // The answer is a delivery: the normalized cache updates this row; the nudges that follow
  // (webhook.delivery.updated) re-query the endpoints as the delivery moves on.
  const [redeliver, redelivering] = useMutation(REDELIVER_WEBHOOK);
  const [retryNow, retrying] = useMutation(RETRY_WEBHOOK_DELIVERY);
  const error = redelivering.error ?? retrying.error;
  const [open, setOpen] = useState(false);
  const short = d.id.slice(0, 8);
  const waiting = d.status === "PENDING" && d.nextAttemptAt;
  const logId = `attempt-log-${d.id}`;
  return (
    <Fragment>
      <tr data-delivery-id={d.id}>
        <td data-label="Event">
          <code>{d.eventType}</code>
        </td>
        <td data-label="Run">
          {d.runId ? (
            <Link to={`/runs/${d.runId}`} className="mono" aria-label={`Run ${d.runId}`}>
              {d.runId.slice(0, 8)}
            </Link>
          ) : (
            <span className="muted">—</span>
          )}
        </td>
        <td data-label="Status">
          <StatusBadge status={d.status} testId="delivery-status" />
        </td>
        <td data-label="Attempts" data-testid="delivery-attempts">
          {d.attempts === 0 ? (
            0
          ) : (
            <button
              type="button"
              className="quiet attempts-toggle"
              aria-expanded={open}
              aria-controls={open ? logId : undefined}
              aria-label={`${d.attempts} ${d.attempts === 1 ? "attempt" : "attempts"}: ${open ? "hide" : "show"} the log of ${d.eventType} delivery ${short}`}
              onClick={() => setOpen((o) => !o)}
            >
              {d.attempts}
            </button>
          )}
        </td>
        <td data-label="Response" data-testid="delivery-response">{d.responseStatus ?? "—"}</td>
        <td data-label="Last error" className="small">{d.lastError ?? <span className="muted">—</span>}</td>
        <td data-label="Next attempt" data-testid="delivery-next-attempt">{waiting ? <When iso={d.nextAttemptAt} /> : <span className="muted">—</span>}</td>
        <td data-label="Created">
          <When iso={d.createdAt} />
        </td>
        <td data-label="Delivered">
          <When iso={d.deliveredAt} relative={false} />
        </td>
        <td data-label="Actions">
          {waiting ? (
            <button
              type="button"
              disabled={retrying.loading}
              title="Try it now instead of waiting for the next attempt"
              aria-label={`Retry now ${d.eventType} delivery ${short}`}
              onClick={() => void retryNow({ variables: { deliveryId: d.id } }).catch(() => undefined)}
            >
              Retry now
            </button>
          ) : (
            <button
              type="button"
              disabled={redelivering.loading || d.status === "PENDING"}
              title={d.status === "PENDING" ? "Still being delivered" : "Send it again, with the same webhook-id"}
              aria-label={`Redeliver ${d.eventType} delivery ${short}`}
              onClick={() => void redeliver({ variables: { deliveryId: d.id } }).catch(() => undefined)}
            >
              Redeliver
            </button>
          )}{" "}
          <CopyButton value={d.id} label={`Copy delivery id ${short}`} />
          {error && (
            <span className="field-error" role="alert">
              {describeError(error)}
            </span>
          )}
        </td>
      </tr>
      {open && (
        <tr className="attempt-log-row">
          <td colSpan={10} id={logId}>
            <AttemptLog delivery={d} />
          </td>
        </tr>
      )}
    </Fragment>
  );
}

/** A delivery's attempts, newest first: the answer (code and the start of its body) or the error,
 * when and how long. The newest 20 are kept, each with at most 1 KiB of the body. */
function AttemptLog({ delivery: d }: { delivery: WebhookDelivery }) {
  const { data, error } = useQuery(WEBHOOK_DELIVERY_ATTEMPTS, {
    variables: { id: d.id },
    fetchPolicy: "cache-and-network",
  });
  const log = data?.webhookDelivery?.attemptLog ?? null;
  if (error) {
    return (
      <p className="note note-error" role="alert">
        {describeError(error)}
      </p>
    );
  }
  if (log === null) return <Loading>Reading the attempts…</Loading>;
  if (log.length === 0) return <p className="muted">No attempt logged yet.</p>;
  const dropped = d.attempts - log.length;
  return (
    <div className="attempt-log">
      <ol aria-label={`Attempts of ${d.eventType} delivery ${d.id.slice(0, 8)}`} reversed>
        {log.map((a) => (
          <li key={a.attempt} data-testid="delivery-attempt">
            <span className="attempt-head">
              <strong>Attempt {a.attempt}</strong>{" "}
              {a.responseStatus !== null ? (
                <code data-testid="attempt-code">HTTP {a.responseStatus}</code>
              ) : (
                <span className="muted">no answer</span>
              )}{" "}
              <When iso={a.startedAt} /> <span className="muted">· {a.durationMs} ms</span>
            </span>
            {a.error && (
              <span className="attempt-error" data-testid="attempt-error">
                {a.error}
              </span>
            )}
            {a.bodyExcerpt && (
              <pre className="attempt-body" data-testid="attempt-body" tabIndex={0} aria-label={`Response body of attempt ${a.attempt}`}>
                {a.bodyExcerpt}
              </pre>
            )}
          </li>
        ))}
      </ol>
      {dropped > 0 && (
        <p className="muted small">
          {dropped === 1 ? "1 older attempt is" : `${dropped} older attempts are`} no longer kept (the newest 20 are).
        </p>
      )}
    </div>
  );
}
