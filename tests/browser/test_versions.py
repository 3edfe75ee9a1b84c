"""A run held on its code version in the console (issue 43, "Done when"): a `pipeline` run
(`tests.version_agents`) parks on `V1`; a deploy renames a step without a patch; the signal
resumes it on code that does not reach its journal, so it is held WAITING `version`. The inbox
lists it with what it waits for, the run page says why, and once the fix (the rename behind
`ctx.patched`) is deployed, Resume in the inbox lets it finish. axe-core in both themes at 1440
and 390 px, no sideways scrolling at 390 px."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import check_screen
from tests.browser.stack import Stack, Tenant
from tests.browser.test_screens import shoot

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]
SIGNAL = 'mutation($id: ID!) { signalRun(input: {id: $id, name: "go"}) { accepted } }'


@pytest.fixture
def deploys(stack: Stack) -> Iterator[Callable[[str], None]]:
    """Deploy an edit of `pipeline` (API and worker restarted on it); the stack's own agents
    are deployed again afterwards, for the tests that follow."""

    def deploy(edit: str) -> None:
        stack.deploy(f"tests.version_agents:{edit}")

    yield deploy
    stack.deploy("")


def test_a_run_held_on_its_code_version_is_listed_explained_and_resumed_after_a_fix(
    page: Page,
    tenant: Tenant,
    sign_in: SignIn,
    stack: Stack,
    deploys: Callable[[str], None],
    tmp_path: Path,
) -> None:
    deploys("V1")
    started = stack.gql(
        tenant,
        "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }",
        {"i": {"agent": "pipeline", "key": "report", "input": {"wait": True}}},
    )
    run_id: str = started["startRun"]["run"]["id"]
    stack.wait_run(tenant, run_id, lambda status, waits: status == "WAITING" and waits == "go")

    deploys("RENAMED")  # `fetch` renamed `load`, with no patch: the journal is out of reach
    assert stack.gql(tenant, SIGNAL, {"id": run_id})["signalRun"]["accepted"]
    stack.wait_run(tenant, run_id, lambda status, waits: waits == "version")

    sign_in(page, tenant, "/awaiting")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    expect(row.get_by_text("a fix deployed: its code no longer reaches the steps")).to_be_visible()
    expect(row.get_by_role("button", name="Resume on the deployed code")).to_be_visible()
    expect(page.get_by_test_id("awaiting-count")).to_have_text(re.compile(r"^\W*1\W*waiting$"))
    check_screen(page, "inbox with a run held on its code version")
    shoot(page, "inbox-version-hold", tmp_path)

    row.get_by_role("link", name="where").click()
    expect(page.get_by_text("Held on its code version")).to_be_visible()
    expect(page.get_by_text("Deploy a fix").first).to_be_visible()
    check_screen(page, "a run held on its code version")

    deploys("PATCHED")  # the fix: the rename behind ctx.patched, so this run keeps `fetch`
    sign_in(page, tenant, "/awaiting")
    row = page.locator(f"tr[data-run-id='{run_id}']")
    row.get_by_role("button", name="Resume on the deployed code").click()
    # Awaited in the page first: its requests pass the context's route handler, which runs only
    # while this thread is in Playwright (a blocking wait here would hold the mutation back).
    expect(row).to_have_count(0)  # QUEUED again: it no longer waits for anyone
    expect(page.get_by_test_id("awaiting-count")).to_have_count(0)
    assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"
