"""Every statement of the webhooks slice, built once at import."""

from __future__ import annotations

from sqlalchemy import ARRAY, String, Uuid, bindparam, text

from outlive.db.models import WebhookDelivery, WebhookEndpoint
from outlive.db.raw import prepare

ENDPOINTS = prepare(
    text(
        "SELECT id, url, events, created_at FROM webhook_endpoints WHERE tenant_id = :tenant_id"
        " ORDER BY created_at DESC, id"
    ).columns(*(WebhookEndpoint.__table__.c[n] for n in ("id", "url", "events", "created_at")))
)
ENDPOINT = prepare(
    text(
        "SELECT id, url, events, created_at FROM webhook_endpoints"
        " WHERE id = :endpoint_id AND tenant_id = :tenant_id"
    ).columns(*(WebhookEndpoint.__table__.c[n] for n in ("id", "url", "events", "created_at")))
)
DELIVERY_COLUMNS = (
    "id, endpoint_id, event_type, status, attempts, response_status, last_error, created_at,"
    " delivered_at, updated_at, tenant_id, dispatched_at, run_id, next_attempt_at"
)
_DELIVERY_COLUMNS_OF = tuple(
    WebhookDelivery.__table__.c[n.strip()] for n in DELIVERY_COLUMNS.split(",")
)
# Each endpoint's newest deliveries, scoped to the tenant, in one statement however many.
DELIVERIES_OF_ENDPOINTS = prepare(
    text(
        "SELECT d.* FROM unnest(:endpoint_ids) AS e(id) CROSS JOIN LATERAL ("
        f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries"
        " WHERE endpoint_id = e.id AND tenant_id = :tenant_id"
        " AND (CAST(:status AS text) IS NULL OR status = CAST(:status AS text))"
        " AND (CAST(:before AS timestamptz) IS NULL OR created_at < CAST(:before AS timestamptz))"
        " ORDER BY created_at DESC, id LIMIT :first) d"
    )
    .bindparams(bindparam("endpoint_ids", type_=ARRAY(Uuid())))
    .columns(*_DELIVERY_COLUMNS_OF)
)
# How many deliveries each endpoint has (of a status, or any), counting at most :cap of each,
# scoped to the tenant, in one statement however many endpoints.
COUNT_DELIVERIES_OF_ENDPOINTS = prepare(
    text(
        "SELECT e.id AS endpoint_id, (SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries"
        " WHERE endpoint_id = e.id AND tenant_id = :tenant_id"
        " AND (CAST(:status AS text) IS NULL OR status = CAST(:status AS text))"
        " LIMIT :cap) d) AS n FROM unnest(:endpoint_ids) AS e(id)"
    ).bindparams(bindparam("endpoint_ids", type_=ARRAY(Uuid())))
)
PENDING_DELIVERY = prepare(
    text(
        "SELECT d.id, d.tenant_id, e.url, e.secret, d.body FROM webhook_deliveries d"
        " JOIN webhook_endpoints e ON e.id = d.endpoint_id"
        " WHERE d.id = :delivery_id AND d.status = 'PENDING'"
    ).columns(WebhookDelivery.body)
)
DELIVERY = prepare(
    text(
        f"SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = :delivery_id"
        " AND tenant_id = :tenant_id"
    ).columns(*_DELIVERY_COLUMNS_OF)
)
# Delivered or failed, back to PENDING and waiting (admitted again under the tenant's jobs cap).
REDELIVER = prepare(
    text(
        "UPDATE webhook_deliveries SET status = 'PENDING', delivered_at = NULL,"
        " dispatched_at = NULL, next_attempt_at = NULL, updated_at = now()"
        " WHERE id = :delivery_id AND tenant_id = :tenant_id AND status <> 'PENDING'"
        f" RETURNING {DELIVERY_COLUMNS}"
    ).columns(*_DELIVERY_COLUMNS_OF)
)
# A delivery's attempts and its end: the outbox's lifecycle (`services.outbox`).
# A failed attempt's retry is due in :delay seconds (the consumer's backoff).
SCHEDULE_NEXT_ATTEMPT = prepare(
    text(
        "UPDATE webhook_deliveries SET next_attempt_at = now() + make_interval(secs => :delay)"
        " WHERE id = :delivery_id AND status = 'PENDING' RETURNING tenant_id"
    )
)
# "Retry now": a PENDING delivery waiting for its retry is due now (its job is brought forward).
RETRY_NOW = prepare(
    text(
        "UPDATE webhook_deliveries SET next_attempt_at = now(), updated_at = now()"
        " WHERE id = :delivery_id AND tenant_id = :tenant_id AND status = 'PENDING'"
        " AND dispatched_at IS NOT NULL AND attempts > 0"
        f" RETURNING {DELIVERY_COLUMNS}"
    ).columns(*_DELIVERY_COLUMNS_OF)
)
# "Retry all pending now": each of the endpoint's PENDING deliveries waiting for a retry (the
# newest :limit) is due now, as RETRY_NOW makes one.
RETRY_PENDING = prepare(
    text(
        "UPDATE webhook_deliveries SET next_attempt_at = now(), updated_at = now()"
        " WHERE id IN (SELECT id FROM webhook_deliveries WHERE endpoint_id = :endpoint_id"
        " AND tenant_id = :tenant_id AND status = 'PENDING' AND dispatched_at IS NOT NULL"
        " AND attempts > 0 AND next_attempt_at > now() ORDER BY created_at DESC LIMIT :limit)"
        " RETURNING id"
    )
)
# Every FAILED delivery of an endpoint back to PENDING and waiting ("Redeliver failed").
REDELIVER_FAILED = prepare(
    text(
        "UPDATE webhook_deliveries SET status = 'PENDING', delivered_at = NULL,"
        " dispatched_at = NULL, next_attempt_at = NULL, updated_at = now()"
        " WHERE id IN (SELECT id FROM webhook_deliveries WHERE endpoint_id = :endpoint_id"
        " AND tenant_id = :tenant_id AND status = 'FAILED' ORDER BY created_at DESC LIMIT :limit)"
        " AND status = 'FAILED' RETURNING id"
    )
)
ENDPOINT_OF_TENANT = prepare(
    text("SELECT id FROM webhook_endpoints WHERE id = :endpoint_id AND tenant_id = :tenant_id")
)
# "Send test event": a delivery of `webhook.test` to one endpoint of the tenant, whatever events
# it asked for; no run. Signed and sent as any other.
INSERT_TEST_DELIVERY = prepare(
    text(
        "INSERT INTO webhook_deliveries (endpoint_id, tenant_id, run_id, event_type, body)"
        " SELECT e.id, e.tenant_id, NULL, 'webhook.test', jsonb_build_object("
        "'type', 'webhook.test',"
        " 'timestamp', (to_jsonb(now() AT TIME ZONE 'UTC') #>> '{}') || '+00\\:00',"
        " 'data', jsonb_build_object('endpointId', CAST(e.id AS text)))"
        " FROM webhook_endpoints e WHERE e.id = :endpoint_id AND e.tenant_id = :tenant_id"
        f" RETURNING {DELIVERY_COLUMNS}"
    ).columns(*_DELIVERY_COLUMNS_OF)
)
LOCK_TENANT = prepare(text("SELECT id FROM tenants WHERE id = :tenant_id FOR UPDATE"))
COUNT_ENDPOINTS = prepare(
    text("SELECT count(*) AS n FROM webhook_endpoints WHERE tenant_id = :tenant_id")
)
INSERT_ENDPOINT = prepare(
    text(
        "INSERT INTO webhook_endpoints (tenant_id, url, secret, events)"
        " VALUES (:tenant_id, :url, :secret, :events) RETURNING id, url, events, created_at"
    ).bindparams(bindparam("events", type_=ARRAY(String())))
)
DELETE_ENDPOINT = prepare(
    text("DELETE FROM webhook_endpoints WHERE id = :endpoint_id AND tenant_id = :tenant_id")
)


# One row per subscribed endpoint, written by the settling statement itself (a CTE over `moved`,
# the settled run; see `services.runs.RunMove`): a settle and its deliveries commit together, in
# one round trip. The body is what the job signs and POSTs, unchanged.
SETTLED_DELIVERIES_CTE = """delivered AS (
    INSERT INTO webhook_deliveries (endpoint_id, tenant_id, run_id, event_type, body)
    SELECT e.id, m.tenant_id, m.id, m.event_type,
           jsonb_build_object(
               'type', m.event_type,
               'timestamp', (to_jsonb(now() AT TIME ZONE 'UTC') #>> '{}') || '+00\\:00',
               'data', jsonb_build_object(
                   'runId', CAST(m.id AS text), 'agent', m.agent, 'status', m.status))
    FROM (SELECT *, 'run.' || lower(status) AS event_type FROM moved) m
    JOIN webhook_endpoints e ON e.tenant_id = m.tenant_id
    WHERE m.status IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
      AND (cardinality(e.events) = 0 OR m.event_type = ANY(e.events))
    RETURNING id)"""

# Each delivery's logged attempts, newest first, scoped to the tenant (bounded by what is kept).
ATTEMPTS_OF_DELIVERIES = prepare(
    text(
        "SELECT delivery_id, attempt, response_status, body_excerpt, error, started_at,"
        " duration_ms FROM webhook_delivery_attempts"
        " WHERE delivery_id = ANY(:delivery_ids) AND tenant_id = :tenant_id"
        " ORDER BY delivery_id, attempt DESC"
    ).bindparams(bindparam("delivery_ids", type_=ARRAY(Uuid())))
)

DELIVERY_ENDPOINT = prepare(
    text(
        "SELECT endpoint_id FROM webhook_deliveries WHERE id = :delivery_id"
        " AND tenant_id = :tenant_id"
    )
)
