"""Prometheus metrics after a real run: every family the issue asks for, with bounded labels and
no tenant ids; a worker's port; `outlive api --workers 2` answering for both processes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Route

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.telemetry import metrics
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.realtime.clients import Socket
from tests.support import (
    Api,
    NudgeWatch,
    Servers,
    TenantHandle,
    loopback_server,
    service_env,
    settled,
    spawn_outlive,
)

pytestmark = pytest.mark.timeout(120)

METRICS_TOKEN = "scrape-me-" + "x" * 16
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}


@pytest.fixture
def settings(servers: Servers) -> Settings:
    """/metrics on the public port, behind its bearer token (off it by default)."""
    return make_settings(servers, metrics_token=METRICS_TOKEN)


# Every family, with exactly its label names: what dashboards and alerts are written against.
FAMILIES: dict[str, set[str]] = {
    "outlive_runs_started": {"agent"},
    "outlive_runs_settled": {"agent", "status"},
    "outlive_run_attempt_duration_seconds": {"agent", "outcome"},
    "outlive_run_queue_wait_seconds": set(),
    "outlive_steps_recorded": {"agent"},
    "outlive_step_memo_hits": {"agent"},
    "outlive_runs_waiting": set(),
    "outlive_timer_lateness_seconds": set(),
    "outlive_jobs": {"type", "outcome"},
    "outlive_job_duration_seconds": {"type"},
    "outlive_job_queue_wait_seconds": {"type"},
    "outlive_jobs_rejected": {"type"},
    "outlive_queue_jobs": {"queue", "state"},
    "outlive_webhook_requests": {"outcome"},
    "outlive_webhook_request_duration_seconds": {"outcome"},
    "outlive_nudges_published": {"type"},
    "outlive_nudge_fanout_seconds": set(),
    "outlive_websocket_connections": set(),
    "outlive_nudge_subscribers": set(),
    "outlive_graphql_operations": {"operation", "type", "outcome", "route"},
    "outlive_graphql_operation_duration_seconds": {"operation", "type"},
    "outlive_db_pool_connections": {"role", "pool", "state"},
    "outlive_db_pool_max_connections": {"role", "pool"},
    "outlive_event_loop_lag_seconds": {"role"},
    "outlive_gc_pause_seconds": {"generation"},
}
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CREATE_ENDPOINT = """mutation($url: String!) {
  createWebhookEndpoint(url: $url, events: ["run.succeeded"]) { endpoint { id } } }"""


def scrape(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    """family -> [(sample name, labels, value)]"""
    return {
        family.name: [(s.name, dict(s.labels), s.value) for s in family.samples]
        for family in text_string_to_metric_families(text)
    }


def value(found: dict[str, Any], sample: str, **labels: str) -> float:
    family = next(f for f in found if sample.startswith(f))
    return sum(
        v
        for name, got, v in found[family]
        if name == sample and all(got.get(k) == w for k, w in labels.items())
    )


@pytest.fixture
async def hook_url() -> AsyncIterator[str]:
    async def ok(_: Any) -> Any:
        from starlette.responses import Response

        return Response(status_code=204)

    async with loopback_server(Starlette(routes=[Route("/hook", ok, methods=["POST"])])) as url:
        yield f"{url}/hook"


async def test_every_family_is_exported_with_bounded_labels_after_a_real_run(
    api: Api,
    worker: WorkerHost,
    sessions: Sessions,
    settings: Settings,
    tenant: TenantHandle,
    hook_url: str,
) -> None:
    await api.gql(CREATE_ENDPOINT, {"url": hook_url}, token=tenant.token)
    assert settings.redis_url is not None
    before = scrape((await api.client.get("/metrics", headers=METRICS_AUTH)).text)
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "demo", {"turns": 2, "delayMs": 0})
        await watch.until(started["run"]["id"], settled)
        await api.gql("query Dashboard { runs(first: 5) { edges { cursor } } }", token=tenant.token)

        async def delivered() -> bool | None:
            now = scrape((await api.client.get("/metrics", headers=METRICS_AUTH)).text)
            labels = {"type": "webhook.deliver.v1", "outcome": "succeeded"}
            done = value(now, "outlive_jobs_total", **labels) > value(
                before, "outlive_jobs_total", **labels
            )
            return done or None

        await watch.until_true(delivered, 30, "the webhook job counted")
    response = await api.client.get("/metrics", headers=METRICS_AUTH)
    assert response.headers["content-type"].startswith("text/plain")
    found = scrape(response.text)

    for family, labels in FAMILIES.items():
        assert family in found, f"{family} is missing"
        for name, got, _ in found[family]:
            assert set(got) - {"le", "quantile"} == labels, (family, name, got)
    # no tenant, run or job id anywhere in a label (bounded cardinality)
    for family, samples in found.items():
        for _, got, _ in samples:
            for label in got.values():
                assert not UUID_RE.search(label), (family, got)

    def grew(sample: str, **labels: str) -> float:
        return value(found, sample, **labels) - value(before, sample, **labels)

    assert grew("outlive_runs_started_total", agent="demo") == 1
    assert grew("outlive_runs_settled_total", agent="demo", status="SUCCEEDED") == 1
    assert grew("outlive_steps_recorded_total", agent="demo") == 2  # one per turn
    assert grew("outlive_run_attempt_duration_seconds_count", agent="demo", outcome="finished") == 1
    assert grew("outlive_run_queue_wait_seconds_count") == 1
    assert grew("outlive_jobs_total", type="webhook.deliver.v1", outcome="succeeded") == 1
    assert grew("outlive_job_duration_seconds_count", type="webhook.deliver.v1") == 1
    assert grew("outlive_webhook_requests_total", outcome="2xx") == 1
    assert grew("outlive_nudges_published_total", type="run.created") >= 1
    assert grew("outlive_nudges_published_total", type="webhook.delivery.updated") >= 2
    assert (
        grew("outlive_graphql_operations_total", operation="Dashboard", type="query", outcome="ok")
        == 1
    )
    assert (
        grew(
            "outlive_graphql_operations_total", operation="anonymous", type="mutation", outcome="ok"
        )
        == 1
    )
    assert (
        value(found, "outlive_db_pool_max_connections", pool="sqlalchemy")
        == (settings.db_pool_size + settings.db_max_overflow) * 2
    )  # the API's pool and the worker's, in one test process
    for role in ("api", "worker"):
        assert value(found, "outlive_db_pool_max_connections", role=role, pool="asyncpg") == (
            settings.db_raw_pool_size
        )
    assert value(found, "outlive_db_pool_max_connections", pool="asyncpg") == (
        settings.db_raw_pool_size * 2
    )
    assert {labels["state"] for _, labels, _ in found["outlive_queue_jobs"]} == {
        "queued",
        "active",
        "scheduled",
    }


async def test_sockets_and_fanout_are_measured(settings: Settings, tenant: TenantHandle) -> None:
    from tests.realtime.clients import serve

    async with serve(settings) as served, httpx.AsyncClient(base_url=served.url) as client:
        http = Api(client)
        async with Socket.open(served.url, token=tenant.token) as sock:
            await sock.subscribe()
            found = scrape((await client.get("/metrics", headers=METRICS_AUTH)).text)
            assert value(found, "outlive_websocket_connections") == 1
            assert value(found, "outlive_nudge_subscribers") == 1
            before = value(found, "outlive_nudge_fanout_seconds_count")
            await http.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0})
            await sock.next_nudge(timeout=10)
        found = scrape((await client.get("/metrics", headers=METRICS_AUTH)).text)
    assert value(found, "outlive_nudge_fanout_seconds_count") > before


def test_operation_names_are_capped_per_process() -> None:
    labels = metrics.OperationLabels(total=3, per_tenant=3)
    assert labels.label("Runs") == "Runs"
    assert labels.label(None) == "anonymous"
    assert labels.label("Start") == "Start"
    assert labels.label("Third") == "Third"
    assert labels.label("Fourth") == "other"  # the cap holds
    assert labels.label("Runs") == "Runs"  # known names still count


async def test_made_up_operation_names_use_no_label_budget(
    api: Api, tenant: TenantHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19, Low 6: 200 failed requests with made-up `operationName`s used up the label
    budget; only an operation that exists in its document and validated is named."""
    headers = {"Authorization": f"Bearer {tenant.token}"}
    for i in range(metrics.MAX_OPERATION_LABELS + 5):
        body = {"query": "query Real { agents { name } }", "operationName": f"Fake{i}"}
        response = await api.client.post("/graphql", json=body, headers=headers)
        assert response.status_code == 400
    await api.gql("query Real { agents { name } }", token=tenant.token)
    found = scrape((await api.client.get("/metrics", headers=METRICS_AUTH)).text)
    names = {got["operation"] for _, got, _ in found["outlive_graphql_operations"]}
    assert "Real" in names
    assert not any(name.startswith("Fake") for name in names)


async def test_metrics_are_off_the_public_port_unless_a_token_is_set(
    servers: Servers, api: Api
) -> None:
    """Issue 19, Low 6: /metrics needed no token on the public port."""
    async with Api.running(make_settings(servers)) as public:
        assert (await public.client.get("/metrics")).status_code == 404
    assert (await api.client.get("/metrics")).status_code == 401
    wrong = {"Authorization": "Bearer not-the-token"}
    assert (await api.client.get("/metrics", headers=wrong)).status_code == 401
    assert (await api.client.get("/metrics", headers=METRICS_AUTH)).status_code == 200


async def test_the_api_serves_metrics_on_its_own_port(servers: Servers) -> None:
    port = free_port()
    settings = make_settings(servers, metrics_port=port, metrics_host="127.0.0.1")
    async with Api.running(settings) as api, httpx.AsyncClient() as client:
        assert (await api.client.get("/metrics")).status_code == 404  # not on the public port
        response = await client.get(f"http://127.0.0.1:{port}/metrics")
    assert response.status_code == 200
    assert "outlive_graphql_operations_total" in response.text


async def test_a_worker_serves_metrics_on_its_port(servers: Servers) -> None:
    port = free_port()
    host = WorkerHost(make_settings(servers, metrics_port=port, metrics_host="127.0.0.1"))
    await host.start()
    try:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        await host.stop()
    assert response.status_code == 200
    found = scrape(response.text)
    assert "outlive_db_pool_connections" in found
    assert "outlive_queue_jobs" in found
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as client:
            await client.get(f"http://127.0.0.1:{port}/metrics")


async def test_api_workers_share_one_view_of_the_metrics(
    settings: Settings, tenant: TenantHandle, tmp_path: Any
) -> None:
    """`outlive api --workers 2`: whichever process answers /metrics, it counts the requests
    both processes served (multiprocess mode), not only its own."""
    port, metrics_port = free_port(), free_port()
    log = open(tmp_path / "api.log", "wb")  # noqa: ASYNC230, SIM115
    env = service_env(
        settings, OUTLIVE_METRICS_PORT=str(metrics_port), OUTLIVE_METRICS_HOST="127.0.0.1"
    )
    process = spawn_outlive("api", "--port", str(port), "--workers", "2", env=env, log=log)
    url = f"http://127.0.0.1:{port}"
    requests = 40
    try:
        await wait_ready(url)
        body = {"query": "query Counted { viewer { user { id } } }"}
        headers = {"Authorization": f"Bearer {tenant.token}"}
        pids: set[str] = set()
        for _ in range(requests):  # a new connection each: the kernel spreads them
            async with httpx.AsyncClient() as client:
                answer = await client.post(f"{url}/graphql", json=body, headers=headers)
                assert answer.status_code == 200
        totals = []
        for _ in range(6):
            async with httpx.AsyncClient() as client:
                text = (await client.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
            totals.append(
                value(scrape(text), "outlive_graphql_operations_total", operation="Counted")
            )
            pids |= set(re.findall(r'pid="(\d+)"', text))
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 20)
        log.close()
    assert totals == [requests] * len(totals), totals
    assert not pids  # summed over processes, not one series per process


async def wait_ready(url: str, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient() as client:
        while True:
            try:
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if loop.time() > deadline:
                raise AssertionError(f"{url} never answered")
            await asyncio.sleep(0.1)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
