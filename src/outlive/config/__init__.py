"""Settings: one `BaseSettings`, built once by a composition root and passed down.

Every variable of the contract (§2) is here under its public name. Nothing reads the environment
anywhere else, and there is no module-level instance.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from outlive.config.limits import SecurityLimits
from outlive.config.values import (
    BUILTIN_AGENTS,
    DEFAULT_CELL,
    ModelPrice,
    Rate,
    RateSetting,
    of_cell,
)
from outlive.urls import PostgresUrl

__all__ = [
    "BUILTIN_AGENTS",
    "DEFAULT_CELL",
    "MissingServiceError",
    "ModelPrice",
    "Rate",
    "RateSetting",
    "Settings",
]


class Settings(SecurityLimits, BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OUTLIVE_", extra="ignore", populate_by_name=True)

    database_url: str | None = Field(
        None, validation_alias=AliasChoices("DATABASE_URL", "database_url")
    )
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "redis_url"))
    redis_cluster: bool = Field(False, description="REDIS_URL names a Redis Cluster node")
    queue_partitions: int | None = Field(
        None,
        ge=1,
        le=64,
        description="saq queues each queue spreads over; unset: 1, 3 on a cluster",
    )
    queue_consume: Annotated[list[int], NoDecode] = Field(
        default_factory=list, description="the partitions a worker consumes (`0,2`); empty: all"
    )

    # Runs (contract §2 and §7).
    run_retry_delay_s: float = Field(5.0, ge=0)
    run_timeout_s: float = Field(600.0, gt=0)
    run_journal_max_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="bytes of a run's recorded step results (every attempt loads them all)",
    )
    blob_threshold_bytes: int = Field(
        256 * 1024,
        ge=1024,
        description="a step result or run output over this (JSON) is stored once, in `blobs`",
    )
    encryption_key: SecretStr | None = Field(
        None,
        description="32 bytes, base64: wraps the data keys of tenants that encrypt at rest",
    )
    reconcile_grace_s: float = Field(60.0, ge=0)
    run_heartbeat_s: float = Field(10.0, gt=0, description="a run's job is stuck after this")
    run_sweep_s: int = Field(5, ge=1, description="how often a worker looks for stuck jobs")
    shutdown_grace_s: float = Field(10.0, ge=0, description="jobs-queue drain time at stop")
    # Process liveness (docs/liveness.md): a worker holds a session advisory lock on a
    # connection of its own; a run whose worker's lock is free is claimed again at once.
    liveness_check_s: float = Field(
        0.5, gt=0, description="how often a worker's relay looks for runs of a gone worker"
    )
    db_liveness_url: str | None = Field(
        None,
        description="the PostgreSQL server itself, for the liveness connection (not PgBouncer in"
        " transaction mode); unset: DATABASE_URL, or no liveness with OUTLIVE_DB_PGBOUNCER=1",
    )

    # Tenant fairness: caps per tenant, overridable per tenant (`outlive tenant set-limits`).
    tenant_max_running_runs: int = Field(
        10, ge=1, description="runs of one tenant in flight (RUNNING, or QUEUED and admitted)"
    )
    tenant_max_inflight_jobs: int = Field(
        20, ge=1, description="webhook deliveries and emails of one tenant in the jobs queue"
    )
    tenant_max_schedules: int = Field(1000, ge=0, description="schedules one tenant may have")
    schedule_min_interval_s: int = Field(
        60, ge=60, description="the smallest interval a schedule's cron may fire at"
    )

    # The relay (`outlive.services.relay`): PostgreSQL is the truth, the queue a copy of it.
    queue_timeout_s: float = Field(
        0.5, gt=0, description="the longest an enqueue may take before the relay gets the row"
    )
    relay_scan_s: float = Field(2.0, gt=0, description="the relay's backstop scan, per worker")
    relay_recheck_s: float = Field(
        60.0, gt=0, description="how often a row still QUEUED/PENDING is handed again (a no-op)"
    )
    relay_batch: int = Field(200, ge=1, description="rows one relay pass hands at most")
    wake_lead_s: float = Field(
        0.3,
        ge=0,
        description="a durable sleep's run is handed back this long before it is due, less when"
        " early wakes would be more than a worker lends (4 per slot) and a quarter of its slots"
        " (services/relay/lead.py); the attempt that claims the run finishes the sleep"
        " in-process, at its due time; 0: handed back when due",
    )
    wake_lead_bounded: bool = Field(
        True,
        description="false: every durable sleep is handed back the whole OUTLIVE_WAKE_LEAD_S"
        " ahead, whatever the rate of wakes (measured worse under bursts of wakes)",
    )

    # Jobs queue (contract §2).
    job_retry_base_s: float = Field(30.0, ge=0)
    job_retry_max_s: float = Field(900.0, ge=0)
    job_max_attempts: int = Field(8, ge=1)

    # Outbound.
    smtp_url: SecretStr | None = None
    smtp_from: str = "Outlive <no-reply@outlive.local>"
    mail_log_links: bool = Field(
        False,
        description="with no OUTLIVE_SMTP_URL, the logged emails keep their invitation links"
        " (credentials); `outlive dev` sets it, anything else withholds them",
    )
    public_url: str = "http://127.0.0.1:8000"
    webhook_allow_private: bool = False
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = Field(60.0, gt=0, description="one model call's deadline, seconds")
    llm_retry_backoff_s: float = Field(
        1.0,
        ge=0,
        description="the llm agent's first wait before calling again after a 429/5xx without"
        " Retry-After (doubling, capped at 60 s, up to 5 calls)",
    )
    llm_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="the models an llm run may choose with `model` (comma-separated); empty:"
        " only OUTLIVE_LLM_MODEL",
    )

    model_prices: Annotated[dict[str, ModelPrice], NoDecode] = Field(
        default_factory=dict,
        description='JSON {"model": {"input": USD per 1M tokens, "output": …}}: prices for'
        " models the maintained price table lacks (or overrides); costs and USD budgets use them",
    )
    llm_max_output_tokens: int = Field(
        4096,
        ge=1,
        description="a model call's output cap when its agent sets no max_tokens: what each"
        " call reserves of the token limits beside its prompt (services/limits.py); what a call"
        " uses beyond its reservation is charged to its tenant alone",
    )

    # Agents beside the installed entry points: "module:attribute" (an Agent or a list of them).
    agent_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    builtin_agents: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(BUILTIN_AGENTS),
        description="the built-in agents this deployment serves (comma-separated, of demo and"
        " llm; empty: none): production may leave out `demo`, which records made-up usage",
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1", "::1"],
        description="addresses or networks (CIDR) of the proxies whose X-Forwarded-For or"
        " Forwarded header names the client: per-client limits key on that client",
    )

    # Realtime.
    realtime: bool = True
    nudges_linger_s: float = Field(
        30.0, ge=0, description="a tenant's channel is kept this long after its last socket left"
    )
    nudges_sharded: bool = Field(
        False, description="sharded pub/sub (SSUBSCRIBE/SPUBLISH, Redis >= 7; Redis Cluster)"
    )
    nudges_redis_url: str | None = Field(
        None, description="the Redis (or Cluster node) that carries nudges; unset: REDIS_URL"
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    stream_max_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="a run's output streams (`ctx.stream`) keep at most this many bytes in Redis;"
        " the oldest chunks go first",
    )
    stream_keep_s: float = Field(
        600.0, gt=0, description="a run's output stream is kept this long after its last write"
    )
    stream_batch_ms: float = Field(
        50.0, ge=0, description="what an agent writes to a stream is sent to Redis this often"
    )
    run_read_token_max_s: int = Field(
        30 * 86400, ge=1, description="the longest life `createRunReadToken` gives a token"
    )

    # The read path (graphql/http.py).
    read_coalescing: bool = Field(
        True, description="identical reads share one execution that starts after they arrived"
    )
    read_linger_ms: float = Field(
        2.0, ge=0, description="during a burst, a batch starts once nobody joined it for this"
    )
    read_max_wait_ms: float = Field(
        50.0, ge=0, description="during a burst, a batch starts at the latest this old"
    )
    compiled_plans: bool = Field(
        True, description="plain-data operations answered without graphql-core's executor"
    )
    persisted_queries_max: int = Field(
        2000, ge=0, description="Automatic Persisted Queries kept per process (LRU)"
    )

    # Named limits shared across workers (`ctx.step(limit="llm")`, `services.limits`).
    limit_llm: RateSetting = Field(
        None,
        description="the llm limit for the whole deployment, N/S (N model calls per S seconds),"
        " spread evenly; off (the default): none",
    )
    limit_llm_tokens: RateSetting = Field(
        None,
        description="the llm token limit for the whole deployment, N/S (N model tokens, input and"
        " output, per S seconds): a call waits while the tokens spent are over it; off (the"
        " default): none",
    )
    limit_park_s: float = Field(
        30.0,
        gt=1,
        description="a step that its named limit makes wait longer than this parks its run"
        " WAITING (a timer) instead of holding its worker slot",
    )
    limit_tenant_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="a tenant without a rate of its own (tenant set-limits --llm-rate) may use"
        " at most this share of OUTLIVE_LIMIT_LLM, and every tenant this share of"
        " OUTLIVE_LIMIT_LLM_TOKENS",
    )
    rate_start_run: RateSetting = Rate(1000, 10)
    rate_signal_run: RateSetting = Rate(1000, 10)
    rate_invite: RateSetting = Rate(100, 3600)
    rate_invite_recipient: RateSetting = Rate(3, 3600)
    # acceptInvitation takes no bearer token: its attempts are limited per client address.
    rate_accept_invitation: RateSetting = Rate(20, 60)
    rate_create_webhook: RateSetting = Rate(20, 60)
    rate_redeliver_webhook: RateSetting = Rate(60, 60)
    rate_redeliver_webhook_endpoint: RateSetting = Rate(10, 60)
    rate_replay_runs: RateSetting = Rate(10, 60)

    # Cron.
    retention_days: int = Field(30, ge=1)
    cron_table: str = Field(
        "outlive.cron.table:CRON", description="module:attribute of the cron dispatch table"
    )

    # Connection budget (README: "The connection budget"): per process, at most
    # db_pool_size + db_max_overflow (SQLAlchemy) + db_raw_pool_size (asyncpg) connections.
    # The whole SQLAlchemy share is kept open: an overflow connection is closed as soon as it
    # goes back to a full pool, so with 5 + 5 a worker under a burst opened and closed ~30
    # connections a second (docs/operating.md#the-connection-budget).
    db_pool_size: int = Field(10, ge=1, description="SQLAlchemy pool: connections kept open")
    db_max_overflow: int = Field(0, ge=0, description="SQLAlchemy pool: extra, closed after use")
    db_raw_pool_size: int = Field(10, ge=1, description="asyncpg pool (single statements): max")
    db_pool_timeout_s: float = Field(30.0, gt=0, description="wait for a pooled connection")
    db_pgbouncer: bool = Field(
        False, description="behind PgBouncer in transaction mode: no prepared-statement caches"
    )

    # Observability.
    log_format: Literal["json", "text"] | None = Field(
        None, description="json or text; unset: json for api/worker, text for dev"
    )
    log_level: str = "INFO"
    log_libraries_level: str = Field("WARNING", description="pgserver, alembic, saq, httpx, …")
    metrics: bool = Field(True, description="API processes export metrics")
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="/metrics on this port of its own (API and worker)"
    )
    metrics_token: SecretStr | None = Field(
        None, description="GET /metrics on the API's public port, with this bearer token"
    )
    gc_freeze: bool = Field(
        True, description="API and worker: startup's objects are never garbage-collected again"
    )
    metrics_max_operations: int = Field(
        200, ge=1, description="operation names with a metrics label of their own, per process"
    )
    metrics_operations_per_tenant: int = Field(
        20,
        ge=1,
        description="of those, the names one tenant may bring in (the rest count as `other`)",
    )
    metrics_host: str = "0.0.0.0"  # noqa: S104 (Prometheus scrapes workers over the network)
    metrics_sample_s: float = Field(5.0, gt=0, description="pool, queue and socket sampling")
    otel_endpoint: str | None = Field(
        None,
        validation_alias=AliasChoices(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "otel_endpoint"
        ),
        description="tracing is on when set (the OTel SDK reads the other OTEL_* variables)",
    )
    otel_sdk_disabled: bool = Field(
        False, validation_alias=AliasChoices("OTEL_SDK_DISABLED", "otel_sdk_disabled")
    )
    otel_semconv_stability_opt_in: str = Field(
        "",
        validation_alias=AliasChoices(
            "OTEL_SEMCONV_STABILITY_OPT_IN", "otel_semconv_stability_opt_in"
        ),
        description="with `gen_ai_latest_experimental` listed, runs are traced as GenAI spans",
    )
    traces_file: str | None = Field(
        None, description="spans also go to this file, a JSON line each as it ends (tracing on)"
    )

    # Replay.
    replay_max_runs: int = Field(1000, ge=1, description="most runs one replayRuns may start")
    replay_max_rate: float = Field(20.0, gt=0, description="fastest replayRuns pace, runs/s")

    # Agents that replay exactly (issue 40).
    shutdown_step_grace_s: float = Field(
        30.0,
        ge=0,
        le=600,
        description="on SIGTERM, a model step in flight may finish (and be recorded) this long"
        " before its run is handed back; 0: handed back at once",
    )
    agent_unavailable_retry_s: float = Field(
        30.0, gt=0, description="a run whose agent's code failed to load is looked at this often"
    )

    # Cells (docs/cells.md): unset directory, one cell (DATABASE_URL), as before round five.
    directory_url: str | None = Field(None, description="tenant -> slot -> cell database")
    cells: Annotated[list[str], NoDecode] = Field(default_factory=list)  # a worker's; all
    directory_poll_s: float = Field(0.2, gt=0, description="how often the directory is read")
    directory_stale_s: float = Field(5.0, gt=0, description="503 past this without a read")
    cell: str | None = Field(None, description="the cell this copy serves (set by the process)")

    @field_validator(
        "allowed_origins",
        "agent_modules",
        "llm_models",
        "builtin_agents",
        "trusted_proxies",
        "cells",
        mode="before",
    )
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("model_prices", mode="before")
    @classmethod
    def _parse_model_prices(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return json.loads(value) if value.strip() else {}
            except ValueError:
                raise ValueError("OUTLIVE_MODEL_PRICES must be a JSON object") from None
        return value

    @field_validator("builtin_agents")
    @classmethod
    def _check_builtin_agents(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(BUILTIN_AGENTS))
        if unknown:
            raise ValueError(f"unknown built-in agent(s) {unknown}; known: {list(BUILTIN_AGENTS)}")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_trusted_proxies(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an address or a network (CIDR)") from None
        return value

    @field_validator("database_url", "db_liveness_url", "directory_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is not None:
            PostgresUrl.parse(value)  # one host or several (`outlive.urls`); says what is wrong
        return value

    @field_validator("queue_consume", mode="before")
    @classmethod
    def _split_consume(cls, value: object) -> object:
        return [int(v) for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        schemes = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")
        if value is not None and not value.startswith(schemes):
            raise ValueError(
                "REDIS_URL must be redis://…, rediss://…, unix://… or redis+cluster://…"
            )
        return value

    def liveness_url(self) -> str | None:
        """Where a worker holds its liveness lock: `OUTLIVE_DB_LIVENESS_URL`, else DATABASE_URL
        unless that is PgBouncer in transaction mode (a session lock cannot live there: the
        lease alone decides then)."""
        if self.db_liveness_url:
            return self.db_liveness_url
        return None if self.db_pgbouncer else self.database_url

    def of_cell(self, name: str) -> str:
        """A queue's name or a Redis key, of the cell these settings serve (`values.of_cell`)."""
        return of_cell(name, self.cell)

    def require_services(self) -> tuple[str, str]:
        """The two URLs a server process cannot run without; never a silent inline fallback."""
        if self.database_url and self.redis_url:
            redis_url = self.redis_url
            if self.redis_cluster and redis_url.startswith(("redis://", "rediss://")):
                redis_url = redis_url.replace("://", "+cluster://", 1)  # OUTLIVE_REDIS_CLUSTER=1
            return self.database_url, redis_url
        missing = [
            name
            for name, value in (("DATABASE_URL", self.database_url), ("REDIS_URL", self.redis_url))
            if not value
        ]
        raise MissingServiceError(
            f"{' and '.join(missing)} not set: Outlive never runs queued work inline "
            "(use `outlive dev` for embedded servers)"
        )


class MissingServiceError(RuntimeError):
    """A server process was started without the database or the queue."""
