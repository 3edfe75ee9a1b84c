"""Browser tests: the built web app in real headless Chromium (Debian's `chromium`, driven by
Playwright through its executable path: no browser download), against real `outlive api` and
`outlive worker` processes on a database and a Redis db index of their own.

Missing pieces fail with how to get them, never a silent skip: Chromium (`apt-get install -y
chromium`), the Python `playwright` package (its wheel carries its driver; never run `playwright
install`), or the web build (`npm --prefix web ci && npm --prefix web run build`). Set
`OUTLIVE_SKIP_BROWSER=1` to skip them on purpose. `OUTLIVE_CHROMIUM` names another Chromium.

Every page is cut off from the internet: a request to anything but this machine is aborted and
recorded, and a test that made one fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest

from tests.browser.stack import Stack, Tenant, running_stack

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright

CHROMIUM = os.environ.get("OUTLIVE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-results" / "browser"


@pytest.fixture(autouse=True)
def clean_redis() -> None:
    """Replaces the suite's autouse fixture: the browser stack has its own Redis db, which must
    not be flushed under its running worker."""


def _missing(message: str) -> None:
    """Fail where the browser tests must run (CI sets OUTLIVE_REQUIRE_BROWSER=1); elsewhere (a
    laptop without Debian's Chromium or Node) skip, saying how to get what is missing."""
    if os.environ.get("OUTLIVE_REQUIRE_BROWSER") == "1":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _requirements() -> None:
    if os.environ.get("OUTLIVE_SKIP_BROWSER") == "1":
        pytest.skip("OUTLIVE_SKIP_BROWSER=1")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing(
            "the browser tests need the Python package `playwright` (a dev dependency: "
            "`uv sync` installs it; do not run `playwright install`, they use Debian's chromium)"
        )
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        _missing(
            f"Chromium not found at {CHROMIUM}: install Debian's with `apt-get install -y "
            "chromium` (or set OUTLIVE_CHROMIUM to a Chromium binary)"
        )
    from outlive.web.build import ensure_built, stale_reason

    if stale_reason() is not None and shutil.which("npm"):
        with contextlib.suppress(SystemExit):  # it says why; the check below decides
            ensure_built()
    reason = stale_reason()
    if reason is not None:
        _missing(
            f"the web build is missing or stale ({reason}): run `npm --prefix web ci && "
            "npm --prefix web run build` (Node.js >= 20), or `uv run outlive dev` once"
        )


@pytest.fixture(scope="package")
def stack(
    server_urls: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    _requirements()
    workdir = tmp_path_factory.mktemp("browser-stack")
    with running_stack(server_urls[0], server_urls[1], workdir) as running:
        yield running


@pytest.fixture(scope="package")
def playwright_driver() -> Iterator[Playwright]:
    _requirements()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)
    driver = sync_playwright().start()
    try:
        yield driver
    finally:
        driver.stop()


@pytest.fixture(scope="package")
def browser(playwright_driver: Playwright) -> Iterator[Browser]:
    # Playwright gives every launch a new, empty profile directory of its own.
    browser = playwright_driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def tenant(stack: Stack) -> Tenant:
    """A tenant of the test's own: its runs list starts empty, no other test starts runs in it."""
    return stack.new_tenant()


class Contexts:
    """Browser contexts cut off from the internet, each with its console errors collected."""

    def __init__(self, browser: Browser, stack: Stack) -> None:
        self._browser = browser
        self._stack = stack
        self.opened: list[BrowserContext] = []
        self.blocked: list[str] = []
        self.errors: list[str] = []

    def new(self) -> BrowserContext:
        context = self._browser.new_context(
            base_url=self._stack.base_url, viewport={"width": 1280, "height": 860}
        )
        context.set_default_timeout(15_000)
        context.route("**/*", self._only_this_machine)
        context.on("page", self._watch)
        self.opened.append(context)
        return context

    def page(self) -> Page:
        return self.new().new_page()

    def _only_this_machine(self, route: Any) -> None:
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlsplit(url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort("internetdisconnected")

    def _watch(self, page: Page) -> None:
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("console", self._csp_violation)

    def _csp_violation(self, message: Any) -> None:
        """The pages' Content-Security-Policy must allow everything they do (GraphiQL's editor
        and workers included): a refused load is an error, not a silent degradation."""
        if "Content Security Policy" in message.text:
            self.errors.append(f"csp: {message.text}")


@pytest.fixture
def contexts(browser: Browser, stack: Stack, request: pytest.FixtureRequest) -> Iterator[Contexts]:
    made = Contexts(browser, stack)
    yield made
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    if failed:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^\w.-]+", "_", request.node.name)
        for i, context in enumerate(made.opened):
            for j, page in enumerate(context.pages):
                page.screenshot(path=str(ARTIFACTS / f"{name}-{i}-{j}.png"), full_page=True)
    for context in made.opened:
        context.close()
    assert made.blocked == [], f"pages tried to reach the internet: {made.blocked}"
    assert made.errors == [], f"uncaught errors in the page: {made.errors}"


@pytest.fixture
def page(contexts: Contexts) -> Page:
    return contexts.page()


@pytest.fixture
def sign_in(stack: Stack) -> Callable[[Page, Tenant], None]:
    """Signs a page in the way `outlive dev`'s link does: `/#token=…`."""
    from playwright.sync_api import expect

    def go(page: Page, tenant: Tenant, path: str = "/") -> None:
        page.goto(f"{path}#token={tenant.token}")
        expect(page.get_by_test_id("tenant")).to_have_text(tenant.slug)
        expect(connection(page)).to_have_attribute("data-state", "live")

    return go


AXE = Path(__file__).resolve().parents[2] / "web" / "node_modules" / "axe-core" / "axe.min.js"
AXE_RUN = """async () => {
  const result = await window.axe.run(document, {resultTypes: ["violations"]});
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => {
      const where = v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ");
      return `${v.impact} ${v.id}: ${v.help} (${where})`;
    });
}"""


def assert_accessible(page: Page, screen: str) -> None:
    """axe-core (web's dev dependency, read from node_modules: works offline) on the page as it
    is: no serious or critical violation. Evaluated over the DevTools protocol, so the page's
    Content-Security-Policy does not apply to it."""
    if not AXE.is_file():
        _missing(f"axe-core not found at {AXE}: run `npm --prefix web ci`")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text() + "\n;undefined")
    violations = page.evaluate(AXE_RUN)
    assert violations == [], f"{screen}: accessibility violations:\n" + "\n".join(violations)


def connection(page: Page) -> Any:
    return page.get_by_role("status", name="Connection")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def check_screen(page: Page, screen: str) -> None:
    """axe in both themes at 1440 and 390 px; at 390 px the page fits the viewport."""
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        for theme in ("light", "dark"):
            page.emulate_media(color_scheme=theme)
            assert_accessible(page, f"{screen} ({theme}, {width} px)")
        if width == 390:
            overflow = page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{screen} scrolls sideways by {overflow}px at 390 px"
    page.set_viewport_size({"width": 1440, "height": 900})
    page.emulate_media(color_scheme="light")
