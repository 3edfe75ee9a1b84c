"""Settings: one `BaseSettings`, built once by a composition root and passed down.

Every variable of the contract (§2) is here under its public name. Nothing reads the environment
anywhere else, and there is no module-level instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


@dataclass(frozen=True, slots=True)
class Rate:
    """A token bucket: at most `count` at once, refilled at `count` per `per_s` seconds."""

    count: int
    per_s: float

    @classmethod
    def parse(cls, value: object) -> object:
        """`"N/S"` (N per S seconds); `"off"` (or 0) means no limit (None)."""
        if not isinstance(value, str):
            return value
        text = value.strip().lower()
        if text in ("off", "0", "none", ""):
            return None
        count, sep, per = text.partition("/")
        try:
            rate = cls(int(count), float(per) if sep else 1.0)
        except ValueError:
            msg = f"{value!r} is not a rate: write N/S (N per S seconds), or off"
            raise ValueError(msg) from None
        if rate.count < 1 or rate.per_s <= 0:
            raise ValueError(f"{value!r}: N must be at least 1 and S positive")
        return rate

    def __str__(self) -> str:
        return f"{self.count}/{self.per_s:g}"


RateSetting = Annotated[Rate | None, NoDecode, BeforeValidator(Rate.parse)]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OUTLIVE_", extra="ignore", populate_by_name=True)

    database_url: str | None = Field(
        None, validation_alias=AliasChoices("DATABASE_URL", "database_url")
    )
    redis_url: str | None = Field(None, validation_alias=AliasChoices("REDIS_URL", "redis_url"))

    # Runs (contract §2 and §7).
    run_retry_delay_s: float = Field(5.0, ge=0)
    run_timeout_s: float = Field(600.0, gt=0)
    reconcile_grace_s: float = Field(60.0, ge=0)
    run_heartbeat_s: float = Field(10.0, gt=0, description="a run's job is stuck after this")
    run_sweep_s: int = Field(5, ge=1, description="how often a worker looks for stuck jobs")
    shutdown_grace_s: float = Field(10.0, ge=0, description="jobs-queue drain time at stop")

    # Jobs queue (contract §2).
    job_retry_base_s: float = Field(30.0, ge=0)
    job_retry_max_s: float = Field(900.0, ge=0)
    job_max_attempts: int = Field(8, ge=1)

    # Outbound.
    smtp_url: SecretStr | None = None
    smtp_from: str = "Outlive <no-reply@outlive.local>"
    public_url: str = "http://127.0.0.1:8000"
    webhook_allow_private: bool = False
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_model: str = "gpt-4o-mini"
    llm_timeout_s: float = Field(60.0, gt=0)

    # Realtime.
    realtime: bool = True
    allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    # Security limits (SECURITY.md lists each one with its default).
    auth_cache_s: float = Field(5.0, ge=0, description="principal cache TTL per API process")
    ws_recheck_s: float = Field(30.0, gt=0, le=60, description="open sockets' tokens re-checked")
    ws_max_per_tenant: int = Field(1000, ge=1, description="open sockets per tenant and process")
    ws_max_bytes: int = Field(64 * 1024, ge=1024, description="largest WebSocket message")
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="largest HTTP request body")
    max_query_cost: int = Field(20_000, ge=1, description="objects one operation may ask for")
    max_json_depth: int = Field(64, ge=2, description="deepest nesting in GraphQL variables")
    max_query_depth: int = Field(12, ge=2, description="deepest selection in a document")
    max_query_aliases: int = Field(30, ge=1, description="aliases in a document")
    max_query_tokens: int = Field(3000, ge=100, description="tokens in a document")
    ws_init_timeout_s: float = Field(10.0, gt=0, description="to send connection_init")
    ws_max_subscriptions: int = Field(5, ge=1, description="operations on one socket")
    api_limit_concurrency: int = Field(10_000, ge=0, description="connections + tasks; 0: none")
    api_header_timeout_s: float = Field(10.0, gt=0, description="to receive a request's headers")
    webhook_timeout_s: float = Field(10.0, gt=0, description="total deadline of one delivery")
    webhook_max_response_bytes: int = Field(4096, ge=0, description="read of a response body")
    webhook_max_endpoints: int = Field(50, ge=1, description="webhook endpoints per tenant")
    rate_start_run: RateSetting = Rate(1000, 10)
    rate_invite: RateSetting = Rate(100, 3600)
    rate_invite_recipient: RateSetting = Rate(3, 3600)
    rate_create_webhook: RateSetting = Rate(20, 60)

    # Cron.
    retention_days: int = Field(30, ge=1)
    cron_table: str = Field(
        "outlive.cron.table:CRON", description="module:attribute of the cron dispatch table"
    )

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            scheme = urlsplit(value).scheme or "(none)"
            raise ValueError(f"DATABASE_URL must be postgresql://…, not {scheme}://")
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("REDIS_URL must be redis://…, rediss://… or unix://…")
        return value

    def require_services(self) -> tuple[str, str]:
        """The two URLs a server process cannot run without; never a silent inline fallback."""
        if self.database_url and self.redis_url:
            return self.database_url, self.redis_url
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
