"""Every change nudges: a walk through the table of contract §5, from every place that makes each
change (run insert, claim, retry, release, cancel request, every settle, every timeline event,
invitations, deliveries), with a real worker, a real API and a real socket.

Each scenario states exactly how many nudges its rows must cause, from what the database says
happened (a run's timeline, a delivery's attempts). Two listeners check it: a raw subscriber of the
tenant's Redis channel, which must carry exactly that multiset, and a socket on the API, which must
hear every distinct (type, id) of it (a socket coalesces repeats of the same pair, nothing else).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.tasks.invitations import expire_invitations
from outlive.db.models import Role
from outlive.db.tx import Sessions
from outlive.realtime.nudges import NUDGE_TYPES
from outlive.services.tenants import create_token
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.realtime.clients import Channel, Socket, publisher, serve
from tests.support import Api, Servers, TenantHandle, loopback_server

# Contract §5, the table this module walks.
TABLE = {
    "run.created": "a run row was inserted",
    "run.updated": "status, attempt, cancel request or output changed (including every settle)",
    "run.event": "a timeline event was appended",
    "invitation.updated": "an invitation was inserted or changed",
    "webhook.delivery.updated": "a delivery was inserted or changed",
    # added with replayRuns (an addition to §5; clients that do not know it ignore it)
    "replay.updated": "a run replay was created, advanced, finished or cancelled",
    # round five (§5)
    "member.updated": "a member joined, changed role or was removed",
    "budget.updated": "a budget's limit, spent, reserved or held runs changed (1/s at most)",
    "schedule.updated": "a schedule was created, changed, paused, resumed, fired or deleted",
}
AGENT_EVENTS = {"turn", "message", "step"}  # appended by an agent: the run itself did not change
Pair = tuple[str, str | None]

ENDPOINTS = "{ webhookEndpoints { deliveries { id status attempts } } }"
CREATE_ENDPOINT = "mutation($url: String!) { createWebhookEndpoint(url: $url) { secret } }"
INVITE = "mutation($e: String!) { inviteMember(email: $e) { id } }"
INVITATIONS = "{ invitations { id status } }"


class Heard:
    """What one listener received, in order; waits are on arrivals, never on the clock."""

    def __init__(self, source: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        self.nudges: list[dict[str, Any]] = []
        self._arrived = asyncio.Condition()
        self._task = asyncio.create_task(self._listen(source))

    async def _listen(self, source: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        while True:
            nudge = await source()
            async with self._arrived:
                self.nudges.append(nudge)
                self._arrived.notify_all()

    def counts(self) -> Counter[Pair]:
        return Counter((n["type"], n["id"]) for n in self.nudges)

    async def until(self, check: Callable[[], Awaitable[bool]], timeout: float = 60) -> None:
        """Re-check after every arrival until `check()` holds."""
        async with asyncio.timeout(timeout):
            while True:
                seen = len(self.nudges)  # before the check: an arrival during it is not missed
                if await check():
                    return
                async with self._arrived:
                    await self._arrived.wait_for(lambda seen=seen: len(self.nudges) > seen)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass
class World:
    settings: Settings
    sessions: Sessions
    tenant: TenantHandle
    http: Api
    channel: Heard
    socket: Heard
    workers: list[WorkerHost] = field(default_factory=list)

    @property
    def token(self) -> str:
        return self.tenant.token

    async def start_worker(self) -> WorkerHost:
        host = WorkerHost(self.settings, concurrency=4, jobs_concurrency=4)
        await host.start()
        self.workers.append(host)
        return host

    async def run(self, run_id: str) -> dict[str, Any]:
        run = await self.http.run(self.token, run_id, events=True)
        assert run is not None
        return run

    async def until_run(self, run_id: str, predicate: Callable[[dict[str, Any]], bool]) -> None:
        async def check() -> bool:
            return predicate(await self.run(run_id))

        await self.channel.until(check)

    async def expected_for_run(self, run_id: str) -> Counter[Pair]:
        """One run.created; one run.event per timeline event; one run.updated per event that
        moved the run (all but an agent's own)."""
        events = [e["type"] for e in (await self.run(run_id))["events"]]
        moved = [e for e in events if e not in AGENT_EVENTS]
        return Counter(
            {
                ("run.created", run_id): 1,
                ("run.event", run_id): len(events),
                ("run.updated", run_id): len(moved),
            }
        )

    async def deliveries(self) -> list[dict[str, Any]]:
        data = await self.http.gql(ENDPOINTS, token=self.token)
        return [d for e in data["webhookEndpoints"] for d in e["deliveries"]]

    async def invitations(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.http.gql(INVITATIONS, token=self.token))[
            "invitations"
        ]
        return found


Scenario = Callable[[World], Awaitable[Counter[Pair]]]


# --- runs -----------------------------------------------------------------------------------


def settled(run: dict[str, Any]) -> bool:
    return run["status"] in ("SUCCEEDED", "FAILED", "CANCELLED")


async def run_to_the_end(w: World, agent_input: dict[str, Any], status: str) -> Counter[Pair]:
    await w.start_worker()
    run_id = (await w.http.start_run(w.token, input=agent_input))["run"]["id"]
    await w.until_run(run_id, settled)
    assert (await w.run(run_id))["status"] == status
    return await w.expected_for_run(run_id)


async def inserted_claimed_turns_succeeded(w: World) -> Counter[Pair]:
    return await run_to_the_end(w, {"turns": 3, "delayMs": 0}, "SUCCEEDED")


async def failed_at_a_turn(w: World) -> Counter[Pair]:
    return await run_to_the_end(w, {"turns": 3, "delayMs": 0, "failAtTurn": 2}, "FAILED")


async def retried_after_a_fault(w: World) -> Counter[Pair]:
    expected = await run_to_the_end(w, {"turns": 1, "delayMs": 0, "flakyAttempts": 1}, "SUCCEEDED")
    assert expected[("run.updated", next(iter(expected))[1])] >= 4  # claim, retry, claim, settle
    return expected


async def cancelled_while_queued(w: World) -> Counter[Pair]:
    run_id = (await w.http.start_run(w.token, input={"turns": 1}))["run"]["id"]
    assert (await w.http.cancel(w.token, run_id))["status"] == "CANCELLED"
    return await w.expected_for_run(run_id)


async def cancel_requested_while_running(w: World) -> Counter[Pair]:
    await w.start_worker()
    run_id = (await w.http.start_run(w.token, input={"turns": 200, "delayMs": 50}))["run"]["id"]
    await w.until_run(run_id, lambda r: any(e["type"] == "turn" for e in r["events"]))
    requested = await w.http.cancel(w.token, run_id)
    assert requested["cancelRequestedAt"] is not None
    await w.until_run(run_id, settled)
    run = await w.run(run_id)
    assert run["status"] == "CANCELLED"
    types = [e["type"] for e in run["events"]]
    assert "cancel_requested" in types
    assert types[-1] == "cancelled"
    return await w.expected_for_run(run_id)


async def released_at_a_worker_shutdown(w: World) -> Counter[Pair]:
    worker = await w.start_worker()
    run_id = (await w.http.start_run(w.token, input={"turns": 200, "delayMs": 50}))["run"]["id"]
    await w.until_run(run_id, lambda r: any(e["type"] == "turn" for e in r["events"]))
    await worker.stop()
    w.workers.remove(worker)
    await w.until_run(run_id, lambda r: r["status"] == "QUEUED")
    assert (await w.http.cancel(w.token, run_id))["status"] == "CANCELLED"
    assert "released" in [e["type"] for e in (await w.run(run_id))["events"]]
    return await w.expected_for_run(run_id)


async def reconciled_on_read(w: World) -> Counter[Pair]:
    assert w.settings.redis_url is not None
    run_id = (await w.http.start_run(w.token, input={"turns": 1}))["run"]["id"]
    redis = Redis.from_url(w.settings.redis_url)
    await redis.flushdb()  # the workflow instance is lost
    await redis.aclose()
    run = await w.run(run_id)  # this read hands it to the queue again (contract §7)
    assert run["status"] == "QUEUED"
    await w.start_worker()
    await w.until_run(run_id, settled)  # the rebuilt instance runs it: its nudges as usual
    return await w.expected_for_run(run_id)


# --- invitations ----------------------------------------------------------------------------


async def invite(w: World) -> str:
    invited: str = (await w.http.gql(INVITE, {"e": "someone@example.com"}, token=w.token))[
        "inviteMember"
    ]["id"]
    return invited


async def until_invitation(w: World, status: str) -> None:
    async def check() -> bool:
        return any(i["status"] == status for i in await w.invitations())

    await w.channel.until(check)


async def invitation_inserted_then_sent(w: World) -> Counter[Pair]:
    await w.start_worker()  # no SMTP configured: the email goes to the log
    invitation_id = await invite(w)
    await until_invitation(w, "SENT")
    return Counter({("invitation.updated", invitation_id): 2})


async def invitation_attempts_recorded_then_failed(w: World) -> Counter[Pair]:
    await w.start_worker()  # SMTP on a port where nothing listens, two attempts
    invitation_id = await invite(w)
    await until_invitation(w, "FAILED")
    return Counter({("invitation.updated", invitation_id): 1 + 2 + 1})


async def invitation_expired_by_cron(w: World) -> Counter[Pair]:
    invitation_id = await invite(w)  # no worker: it stays PENDING
    async with w.sessions.unit() as uow:
        await uow.session.execute(
            text(
                "UPDATE invitations SET created_at = now() - interval '8 days',"
                " expires_at = now() - interval '1 day' WHERE id = :id"
            ),
            {"id": invitation_id},
        )
    assert w.settings.redis_url is not None
    redis = Redis.from_url(w.settings.redis_url)
    async with publisher(w.settings) as pub:
        deps = CronDeps(w.sessions.wired(nudge_sink=pub.defer), w.settings, redis)
        assert await expire_invitations(deps) >= 1
    await redis.aclose()
    assert (await w.invitations())[0]["status"] == "EXPIRED"
    return Counter({("invitation.updated", invitation_id): 2})


# --- deliveries -----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def endpoint(statuses: list[int]) -> AsyncIterator[str]:
    async def hook(request: Request) -> Response:
        return Response(status_code=statuses.pop(0) if statuses else 200)

    async with loopback_server(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as url:
        yield f"{url}/hook"


async def delivery_to(w: World, statuses: list[int], final: str) -> Counter[Pair]:
    async with endpoint(statuses) as url:
        await w.http.gql(CREATE_ENDPOINT, {"url": url}, token=w.token)
        expected = await run_to_the_end(w, {"turns": 1, "delayMs": 0}, "SUCCEEDED")

        async def check() -> bool:
            return any(d["status"] == final for d in await w.deliveries())

        await w.channel.until(check)
    (delivery,) = await w.deliveries()
    # inserted; each attempt recorded; each retried one's next attempt scheduled (all but the
    # last); given up
    retried = delivery["attempts"] - 1
    changes = 1 + delivery["attempts"] + retried + (1 if final == "FAILED" else 0)
    return expected + Counter({("webhook.delivery.updated", delivery["id"]): changes})


async def delivery_inserted_attempt_recorded_delivered(w: World) -> Counter[Pair]:
    # inserted; attempt 1 answered 500 (recorded); attempt 2 delivered (counted with it)
    return await delivery_to(w, [500], "DELIVERED") - Counter()


async def delivery_attempts_recorded_then_failed(w: World) -> Counter[Pair]:
    return await delivery_to(w, [500] * 10, "FAILED")


async def delivery_to_a_private_address_refused(w: World) -> Counter[Pair]:
    # refused before any request: recorded FAILED at once, the attempt counted
    async with endpoint([]) as url:
        await w.http.gql(CREATE_ENDPOINT, {"url": url}, token=w.token)
        expected = await run_to_the_end(w, {"turns": 1, "delayMs": 0}, "SUCCEEDED")

        async def check() -> bool:
            return any(d["status"] == "FAILED" for d in await w.deliveries())

        await w.channel.until(check)
    (delivery,) = await w.deliveries()
    return expected + Counter({("webhook.delivery.updated", delivery["id"]): 2})


async def delivery_redelivered(w: World) -> Counter[Pair]:
    # delivered; redeliverWebhook puts it back to PENDING (1) and the job delivers it again (1)
    async with endpoint([]) as url:
        expected = await delivery_to_url(w, url, "DELIVERED")
        (delivery,) = await w.deliveries()
        await w.http.gql(REDELIVER, {"id": delivery["id"]}, token=w.token)

        async def check() -> bool:
            (again,) = await w.deliveries()
            return bool(again["status"] == "DELIVERED" and again["attempts"] == 2)

        await w.channel.until(check)
    return expected + Counter({("webhook.delivery.updated", delivery["id"]): 2})


async def delivery_to_url(w: World, url: str, final: str) -> Counter[Pair]:
    await w.http.gql(CREATE_ENDPOINT, {"url": url}, token=w.token)
    expected = await run_to_the_end(w, {"turns": 1, "delayMs": 0}, "SUCCEEDED")

    async def check() -> bool:
        return any(d["status"] == final for d in await w.deliveries())

    await w.channel.until(check)
    (delivery,) = await w.deliveries()
    return expected + Counter({("webhook.delivery.updated", delivery["id"]): 2})


# --- retry and replay -----------------------------------------------------------------------

RETRY = "mutation($id: ID!) { retryRun(id: $id) { created run { id } } }"
REPLAY = """mutation { replayRuns(filter: {status: [FAILED]}, rate: 5) { id total status } }"""
REPLAY_STATE = "query($id: ID!) { runReplay(id: $id) { status started } }"
REDELIVER = "mutation($id: ID!) { redeliverWebhook(deliveryId: $id) { id status } }"


async def retried_by_retry_run(w: World) -> Counter[Pair]:
    expected = await run_to_the_end(w, {"turns": 1, "delayMs": 0, "failAtTurn": 1}, "FAILED")
    original = next(iter(expected))[1]
    again = (await w.http.gql(RETRY, {"id": original}, token=w.token))["retryRun"]
    assert again["created"] is True
    await w.until_run(again["run"]["id"], settled)
    return expected + await w.expected_for_run(again["run"]["id"])


async def replayed_by_replay_runs(w: World) -> Counter[Pair]:
    expected = await run_to_the_end(w, {"turns": 1, "delayMs": 0, "failAtTurn": 1}, "FAILED")
    replay = (await w.http.gql(REPLAY, token=w.token))["replayRuns"]
    assert (replay["total"], replay["status"]) == (1, "RUNNING")

    async def done() -> bool:
        state = await w.http.gql(REPLAY_STATE, {"id": replay["id"]}, token=w.token)
        return bool(state["runReplay"]["status"] == "DONE")

    await w.channel.until(done)
    data = await w.http.gql("{ runs { edges { node { id retriedFromId } } } }", token=w.token)
    newest = data["runs"]["edges"][0]["node"]  # newest first: the replayed run
    original = next(iter(expected))[1]
    assert newest["retriedFromId"] == original
    new_run = newest["id"]
    await w.until_run(new_run, settled)
    # created (1) and the one tick that started the run and finished the replay (1)
    return (
        expected
        + await w.expected_for_run(new_run)
        + Counter({("replay.updated", replay["id"]): 2})
    )


async def member_changed_then_removed(w: World) -> Counter[Pair]:
    async with w.sessions.unit() as uow:
        principal, _ = await create_token(
            uow,
            tenant_slug=w.tenant.principal.tenant.slug,
            email="mo@every.test",
            role=Role.OPERATOR,
        )
    user = str(principal.user.id)
    set_role = "mutation($u: ID!) { setMemberRole(userId: $u, role: VIEWER) { role } }"
    await w.http.gql(set_role, {"u": user}, token=w.token)
    await w.http.gql("mutation($u: ID!) { removeMember(userId: $u) }", {"u": user}, token=w.token)
    return Counter({("member.updated", user): 2})


async def schedule_made_paused_deleted(w: World) -> Counter[Pair]:
    create = (
        'mutation { createSchedule(input: {agent: "demo", cron: "0 8 * * 1-5",'
        ' timezone: "Europe/Paris"}) { id } }'
    )
    made = (await w.http.gql(create, token=w.token))["createSchedule"]["id"]
    pause = "mutation($id: ID!) { pauseSchedule(id: $id) { id } }"
    await w.http.gql(pause, {"id": made}, token=w.token)
    await w.http.gql("mutation($id: ID!) { deleteSchedule(id: $id) }", {"id": made}, token=w.token)
    return Counter({("schedule.updated", made): 3})  # made, paused, deleted


async def budget_set_then_deleted(w: World) -> Counter[Pair]:
    set_budget = (
        "mutation { setBudget(input: {scope: TENANT, period: DAY, limitTokens: 10}) { id } }"
    )
    made = (await w.http.gql(set_budget, token=w.token))["setBudget"]["id"]
    await w.http.gql("mutation($id: ID!) { deleteBudget(id: $id) }", {"id": made}, token=w.token)
    return Counter({("budget.updated", made): 2})  # the second one when its second is over


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# name: (scenario, settings overrides, the §5 types it shows)
SCENARIOS: dict[str, tuple[Scenario, dict[str, Any], set[str]]] = {
    "run inserted, claimed, its turns, succeeded": (
        inserted_claimed_turns_succeeded,
        {},
        {"run.created", "run.updated", "run.event"},
    ),
    "run failed at a turn": (failed_at_a_turn, {}, {"run.updated", "run.event"}),
    "run retried after a fault": (retried_after_a_fault, {}, {"run.updated", "run.event"}),
    "run cancelled while queued": (cancelled_while_queued, {}, {"run.updated", "run.event"}),
    "run cancel requested while running": (
        cancel_requested_while_running,
        {},
        {"run.updated", "run.event"},
    ),
    "run released at a worker shutdown": (
        released_at_a_worker_shutdown,
        {},
        {"run.updated", "run.event"},
    ),
    "run reconciled on read": (
        reconciled_on_read,
        {"reconcile_grace_s": 0},
        {"run.updated", "run.event"},
    ),
    "invitation inserted, then sent": (invitation_inserted_then_sent, {}, {"invitation.updated"}),
    "invitation attempts recorded, then failed": (
        invitation_attempts_recorded_then_failed,
        {"smtp_url": f"smtp://127.0.0.1:{closed_port()}", "job_max_attempts": 2},
        {"invitation.updated"},
    ),
    "invitation expired by cron": (invitation_expired_by_cron, {}, {"invitation.updated"}),
    "delivery inserted, an attempt recorded, delivered": (
        delivery_inserted_attempt_recorded_delivered,
        {},
        {"webhook.delivery.updated"},
    ),
    "delivery attempts recorded, then failed": (
        delivery_attempts_recorded_then_failed,
        {"job_max_attempts": 2},
        {"webhook.delivery.updated"},
    ),
    "delivery redelivered": (delivery_redelivered, {}, {"webhook.delivery.updated"}),
    "run retried by retryRun": (retried_by_retry_run, {}, {"run.created", "run.updated"}),
    "runs replayed by replayRuns": (replayed_by_replay_runs, {}, {"replay.updated"}),
    "member's role changed, then removed": (member_changed_then_removed, {}, {"member.updated"}),
    "budget set, then deleted": (budget_set_then_deleted, {}, {"budget.updated"}),
    "schedule made, paused, deleted": (schedule_made_paused_deleted, {}, {"schedule.updated"}),
    "delivery to a private address refused": (
        delivery_to_a_private_address_refused,
        {"webhook_allow_private": False},
        {"webhook.delivery.updated"},
    ),
}


def test_the_walk_covers_every_row_of_the_table() -> None:
    assert set(TABLE) == NUDGE_TYPES
    assert set().union(*(types for _, _, types in SCENARIOS.values())) == set(TABLE)


@pytest.fixture
async def world(
    request: pytest.FixtureRequest,
    servers: Servers,
    sessions: Sessions,
    tenant: TenantHandle,
) -> AsyncIterator[World]:
    _, overrides, _ = SCENARIOS[request.node.callspec.params["name"]]
    settings = make_settings(servers, **overrides)
    # Refusing private destinations is the worker's part (as after a DNS change): the API that
    # registers the loopback endpoint allows them.
    api_settings = make_settings(
        servers, **{k: v for k, v in overrides.items() if k != "webhook_allow_private"}
    )
    assert settings.redis_url is not None
    async with (
        serve(api_settings) as served,
        httpx.AsyncClient(base_url=served.url, timeout=30) as client,
        Channel(settings.redis_url, tenant.id) as channel,
        Socket.open(served.url, token=tenant.token) as sock,
    ):
        await sock.subscribe()
        w = World(
            settings=settings,
            sessions=sessions,
            tenant=tenant,
            http=Api(client),
            channel=Heard(lambda: channel.next(timeout=3600)),
            socket=Heard(lambda: sock.next_nudge(timeout=3600)),
        )
        try:
            yield w
        finally:
            for host in w.workers:
                await host.stop()
            await w.channel.stop()
            await w.socket.stop()


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_every_change_nudges(world: World, name: str) -> None:
    scenario, _, types = SCENARIOS[name]
    expected = await scenario(world)
    assert {t for t, _ in expected} >= types

    async def all_arrived() -> bool:
        return world.channel.counts() >= expected

    try:
        await world.channel.until(all_arrived, timeout=30)
    except TimeoutError:
        missing = expected - world.channel.counts()
        raise AssertionError(
            f"never published: {dict(missing)}; heard {world.channel.nudges}"
        ) from None
    for host in world.workers:  # nothing moves any more: what was heard is all there is
        await host.stop()
    world.workers.clear()
    assert world.channel.counts() == expected, world.channel.nudges

    async def socket_heard_every_pair() -> bool:
        return set(world.socket.counts()) >= set(expected)

    await world.socket.until(socket_heard_every_pair)
    assert set(world.socket.counts()) == set(expected)
    assert all(n["tenantId"] == str(world.tenant.id) for n in world.socket.nudges)
