"""The run page shows the stream as it is written (issue 30): a live reply under the step that
will record it, replaced by what the step recorded when it completes; and after a reconnect the
live text goes on from where it was, with no chunk lost or repeated.

How fast the first token shows is measured in `bench/first_token.py`, not here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from outlive.agents.demo import stream_text
from tests.browser.conftest import assert_accessible, connection
from tests.browser.stack import Stack, Tenant

pytestmark = pytest.mark.browser

SignIn = Callable[..., None]

# Every change of the Steps view, as the page drew it: the live text (and whether its stream
# ended), how many completed steps and recorded outputs were shown. Marks the document so that
# a reload (which would wipe it) is caught.
WATCH_STEPS = """() => {
  window.__samples = [];
  window.__noReload = true;
  const look = () => {
    const live = document.querySelector('[data-testid="step-live"]');
    const text = live ? [...live.querySelectorAll('[data-testid="live-text"]')]
      .map((el) => el.textContent).join("") : null;
    const sample = {
      text,
      ended: live ? live.dataset.ended === "true" : null,
      steps: document.querySelectorAll('[data-testid="step"]').length,
      outputs: document.querySelectorAll('[data-testid="step-output"]').length,
    };
    const last = window.__samples[window.__samples.length - 1];
    if (!last || JSON.stringify(last) !== JSON.stringify(sample)) window.__samples.push(sample);
  };
  look();
  new MutationObserver(look).observe(
    document.body, {subtree: true, childList: true, characterData: true, attributes: true});
}"""


def open_steps(page: Page, sign_in: SignIn, tenant: Tenant, run_id: str) -> None:
    sign_in(page, tenant, f"/runs/{run_id}?tab=steps")
    expect(page.get_by_role("heading", name="Steps")).to_be_visible()
    page.evaluate(WATCH_STEPS)


def samples(page: Page) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = page.evaluate("window.__samples")
    return found


def turn_of(text: str) -> int:
    assert text.startswith("turn "), text
    return int(text.split(":", 1)[0].removeprefix("turn "))


def assert_each_live_text_is_a_prefix(seen: list[dict[str, Any]], chars: int) -> None:
    """A lost chunk or one shown twice would leave a live text that is not a prefix of what its
    turn writes."""
    for sample in seen:
        if sample["text"]:
            expected = stream_text(turn_of(sample["text"]), chars)
            assert expected.startswith(sample["text"]), (sample, expected[: len(sample["text"])])


def test_the_step_in_progress_shows_its_live_output_then_what_it_recorded(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    chars = 400  # 40 chunks, one per 40 ms: 1.6 s of writing per turn
    run_id = stack.start_run(tenant, turns=2, delayMs=1000, streamChars=chars, streamDelayMs=40)
    open_steps(page, sign_in, tenant, run_id)

    live = page.get_by_test_id("step-live")
    expect(live.get_by_test_id("live-text")).to_contain_text("turn 1: abc")
    expect(live.locator("td").first).to_have_text("1")  # under the step that will record it
    assert_accessible(page, "run page, steps (live output)")

    outputs = page.get_by_test_id("step-output")
    expect(outputs).to_have_count(2, timeout=30_000)
    expect(outputs.nth(0)).to_have_text(stream_text(1, chars))  # what step 1 recorded
    expect(outputs.nth(1)).to_have_text(stream_text(2, chars))
    expect(page.get_by_test_id("step")).to_have_count(2)
    expect(live).to_have_count(0)
    assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"

    seen = samples(page)
    assert_each_live_text_is_a_prefix(seen, chars)
    # live before its step completed: part of turn 1's text with no step recorded yet, then
    # part of turn 2's under step 1's recorded output
    assert any(s["steps"] == 0 and s["text"] and len(s["text"]) < chars for s in seen), seen
    assert any(
        s["outputs"] == 1 and s["text"] and turn_of(s["text"]) == 2 and len(s["text"]) < chars
        for s in seen
    ), seen
    # replaced: once a step's recorded output shows, its live text is gone
    for s in seen:
        if s["text"]:
            assert turn_of(s["text"]) > s["outputs"], s
    assert page.evaluate("window.__noReload") is True


def test_live_output_goes_on_after_a_reconnect_with_no_chunk_lost_or_repeated(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    chars = 1500  # 150 chunks, one per 50 ms: 7.5 s of writing
    run_id = stack.start_run(tenant, turns=1, delayMs=1000, streamChars=chars, streamDelayMs=50)
    open_steps(page, sign_in, tenant, run_id)
    text = page.get_by_test_id("live-text")
    expect(text).to_contain_text("turn 1: abc")

    stack.stop_api()  # open sockets are closed with 1012; the worker writes on
    expect(connection(page)).to_have_attribute("data-state", "reconnecting")
    before = max(len(s["text"] or "") for s in samples(page))
    stack.start_api()
    expect(connection(page)).to_have_attribute("data-state", "live", timeout=45_000)

    output = page.get_by_test_id("step-output")
    expect(output).to_have_count(1, timeout=30_000)
    expect(output).to_have_text(stream_text(1, chars))
    seen = samples(page)
    assert_each_live_text_is_a_prefix(seen, chars)
    longest = max(len(s["text"] or "") for s in seen)
    assert before < longest == chars, (before, longest)  # it went on, to the last chunk
    assert page.evaluate("window.__noReload") is True


def test_overview_shows_what_the_live_run_is_writing_and_drops_it_once_settled(
    page: Page, tenant: Tenant, sign_in: SignIn, stack: Stack
) -> None:
    """Issue 45, item 5: the live stream at the top of Overview while the run is live."""
    chars = 400  # 40 chunks, one per 40 ms, in each of 2 turns
    run_id = stack.start_run(tenant, turns=2, delayMs=1000, streamChars=chars, streamDelayMs=40)
    sign_in(page, tenant, f"/runs/{run_id}")
    panel = page.get_by_test_id("overview-live")
    text = panel.get_by_test_id("overview-live-text")
    expect(text).to_contain_text("turn 1: abc")
    shown = text.inner_text()
    assert stream_text(turn_of(shown), chars).startswith(shown)  # nothing lost or shown twice
    assert_accessible(page, "run page, overview (live output)")
    expect(text).to_contain_text("turn 2: abc", timeout=30_000)  # the next turn's stream
    expect(page.get_by_test_id("run-status")).to_have_text("SUCCEEDED", timeout=30_000)
    expect(panel).to_have_count(0)  # settled: the output is the run's own now
    assert stack.wait_settled(tenant, run_id) == "SUCCEEDED"
