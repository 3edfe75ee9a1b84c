"""The `outlive` command: one-line errors with a non-zero status; tokens on the last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest

from outlive.config import Settings
from tests.conftest import make_settings
from tests.support import Api, Servers


def outlive(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    return subprocess.run(
        [sys.executable, "-m", "outlive.cli", *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("outlive: error: ")
    return lines[0]


@pytest.mark.parametrize("command", [["api"], ["worker"]])
def test_servers_refuse_to_start_without_the_database_and_queue(command: list[str]) -> None:
    done = outlive(*command)
    assert done.returncode == 1
    line = _one_line_error(done)
    assert "DATABASE_URL and REDIS_URL not set" in line
    assert "never runs queued work inline" in line


def test_a_bad_url_is_a_one_line_error() -> None:
    done = outlive("worker", env={"DATABASE_URL": "mysql://x", "REDIS_URL": "redis://x"})
    assert done.returncode == 2
    assert "DATABASE_URL must be postgresql://" in _one_line_error(done)


def test_an_unreachable_database_is_a_one_line_error() -> None:
    done = outlive(
        "token",
        "create",
        "--tenant",
        "acme",
        "--email",
        "a@acme.test",
        env={"DATABASE_URL": "postgresql://postgres@127.0.0.1:9/nope"},
    )
    assert done.returncode == 1
    line = _one_line_error(done)  # no outage warning beside it: a one-shot command
    assert "PostgreSQL cannot be reached" in line
    assert "127.0.0.1', 9)" in line  # the driver's own words: what was refused


def test_token_create_rejects_bad_input(settings: Settings) -> None:
    env = {"DATABASE_URL": settings.database_url or ""}
    done = outlive("token", "create", "--tenant", "Not A Slug", "--email", "a@b.test", env=env)
    assert done.returncode == 2
    assert "not a valid tenant slug" in _one_line_error(done)
    done = outlive("token", "create", "--tenant", "acme", "--email", "nope", env=env)
    assert done.returncode == 2
    assert "not a valid email" in _one_line_error(done)


async def test_token_create_prints_a_working_token_last(settings: Settings, api: Api) -> None:
    env = {"DATABASE_URL": settings.database_url or ""}
    done = outlive("token", "create", "--tenant", "acme-cli", "--email", "ops@acme.test", env=env)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip().splitlines()[-1]
    viewer = await api.gql("{ viewer { tenant { slug } user { email } } }", token=token)
    assert viewer["viewer"] == {"tenant": {"slug": "acme-cli"}, "user": {"email": "ops@acme.test"}}
    again = outlive("token", "create", "--tenant", "acme-cli", "--email", "ops@acme.test", env=env)
    other = again.stdout.strip().splitlines()[-1]
    assert other != token  # a new token for the same user; the first keeps working
    assert (await api.gql("{ viewer { tenant { slug } } }", token=token))["viewer"]


async def test_token_create_makes_a_token_of_a_role_never_above_its_member(
    settings: Settings, api: Api
) -> None:
    env = {"DATABASE_URL": settings.database_url or ""}
    base = ("token", "create", "--tenant", "acme-roles", "--email")
    viewer = outlive(*base, "eve@acme.test", "--role", "VIEWER", env=env)
    assert viewer.returncode == 0, viewer.stderr
    assert "created a VIEWER token" in viewer.stdout
    token = viewer.stdout.strip().splitlines()[-1]
    assert (await api.gql("{ viewer { role } }", token=token))["viewer"]["role"] == "VIEWER"
    again = outlive(*base, "eve@acme.test", env=env)  # no --role: the member's own
    assert "created a VIEWER token" in again.stdout
    above = outlive(*base, "eve@acme.test", "--role", "ADMIN", env=env)
    assert above.returncode == 2
    assert "a token cannot do more than its member" in _one_line_error(above)
    wrong = outlive(*base, "eve@acme.test", "--role", "ROOT", env=env)
    assert wrong.returncode == 2


async def test_migrate_is_safe_to_run_twice(servers: Servers) -> None:
    url = await servers.clone()
    for _ in range(2):
        done = outlive("migrate", env={"DATABASE_URL": url})
        assert done.returncode == 0, done.stderr


def test_schema_prints_the_sdl() -> None:
    done = outlive("schema")
    assert done.returncode == 0
    assert "startRun(input: StartRunInput!): StartRunPayload!" in done.stdout
    assert "nudges: Nudge!" in done.stdout


def test_an_unknown_command_fails(tmp_path: Any) -> None:
    done = outlive("launch")
    assert done.returncode == 2


def test_cron_list_prints_the_table() -> None:
    from outlive.cron.table import CRON

    done = outlive("cron", "list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split("  ")[0].strip() for line in lines] == list(CRON)
    assert "prune_old_runs, prune_old_deliveries" in lines[0]


def test_cron_run_fires_an_expression_now(settings: Settings) -> None:
    env = {"DATABASE_URL": settings.database_url or "", "REDIS_URL": settings.redis_url or ""}
    done = outlive("cron", "run", "*/10 * * * *", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ran"] == ["expire_invitations"]
    assert report["failed"] == {}
    unknown = outlive("cron", "run", "1 2 3 4 5", env=env)
    assert unknown.returncode == 2
    assert "no cron expression '1 2 3 4 5'" in _one_line_error(unknown)


def _created_token(env: dict[str, str], tenant: str, *extra: str) -> str:
    done = outlive("token", "create", "--tenant", tenant, "--email", f"ops@{tenant}.test", *extra,
                   env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _token_rows(env: dict[str, str], *args: str) -> list[dict[str, str]]:
    done = outlive("token", "list", *args, env=env)
    assert done.returncode == 0, done.stderr
    header, *lines = done.stdout.strip().splitlines()
    columns = header.split("\t")
    assert columns == ["id", "tenant", "user", "created", "expires", "revoked"]
    assert "olv_" not in done.stdout  # never the token itself
    return [dict(zip(columns, line.split("\t"), strict=True)) for line in lines]


async def test_token_list_shows_each_token_with_its_expiry_but_never_the_token(
    settings: Settings,
) -> None:
    env = {"DATABASE_URL": settings.database_url or ""}
    _created_token(env, "list-a")
    _created_token(env, "list-a", "--expires-in", "2h")
    _created_token(env, "list-b")
    rows = _token_rows(env, "--tenant", "list-a")
    assert [r["tenant"] for r in rows] == ["list-a", "list-a"]
    assert [r["user"] for r in rows] == ["ops@list-a.test"] * 2
    assert rows[0]["expires"] == "-"
    created, expires = (datetime.fromisoformat(rows[1][k]) for k in ("created", "expires"))
    assert timedelta(hours=2) - timedelta(minutes=1) < expires - created <= timedelta(hours=2)
    assert [r["revoked"] for r in rows] == ["-", "-"]
    assert {r["tenant"] for r in _token_rows(env)} >= {"list-a", "list-b"}


async def test_token_revoke_stops_the_token_and_is_idempotent(servers: Servers) -> None:
    # The database's word, without a cache: tests/realtime/test_revocation.py covers the cache.
    settings = make_settings(servers, auth_cache_s=0)
    async with Api.running(settings) as api:
        await _revoke_and_check(settings, api)


async def _revoke_and_check(settings: Settings, api: Api) -> None:
    env = {"DATABASE_URL": settings.database_url or "", "REDIS_URL": settings.redis_url or ""}
    token = _created_token(env, "revoke-cli")
    kept = _created_token(env, "revoke-cli")
    assert await api.gql("{ viewer { tenant { slug } } }", token=token)
    (row, _) = _token_rows(env, "--tenant", "revoke-cli")
    done = outlive("token", "revoke", row["id"], env=env)
    assert done.returncode == 0, done.stderr
    assert f"revoked token {row['id']}" in done.stdout
    response = await api.post("{ viewer { tenant { slug } } }", token=token)
    assert response.status_code == 401
    assert response.json()["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert await api.gql("{ viewer { tenant { slug } } }", token=kept)  # the other one works
    (revoked, _) = _token_rows(env, "--tenant", "revoke-cli")
    assert revoked["revoked"] != "-"
    again = outlive("token", "revoke", row["id"], env=env)
    assert again.returncode == 0, again.stderr
    assert _token_rows(env, "--tenant", "revoke-cli")[0]["revoked"] == revoked["revoked"]


@pytest.mark.parametrize(
    ("token_id", "message"),
    [("nope", "is not a token id"), ("00000000-0000-0000-0000-000000000000", "no token")],
)
def test_token_revoke_of_an_unknown_id_is_a_one_line_error(
    settings: Settings, token_id: str, message: str
) -> None:
    env = {"DATABASE_URL": settings.database_url or "", "REDIS_URL": settings.redis_url or ""}
    done = outlive("token", "revoke", token_id, env=env)
    assert done.returncode == 2
    assert message in _one_line_error(done)


def test_token_create_refuses_a_bad_lifetime(settings: Settings) -> None:
    env = {"DATABASE_URL": settings.database_url or ""}
    for bad in ("soon", "0", "-5m"):
        done = outlive("token", "create", "--tenant", "x", "--email", "a@x.test",
                       "--expires-in", bad, env=env)  # fmt: skip
        assert done.returncode == 2
        assert "--expires-in" in done.stderr
