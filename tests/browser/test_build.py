"""`ensure_built` (what `outlive dev` runs before serving): when it installs, when it builds, and
how it fails without Node.js. No browser here, and no npm: these look at files only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from outlive.web import build
from outlive.web.build import LOCK_STAMP, node_problem, plan, stale_reason


@pytest.fixture
def web(tmp_path: Path) -> Path:
    web = tmp_path / "web"
    (web / "src").mkdir(parents=True)
    (web / "package.json").write_text("{}")
    (web / "package-lock.json").write_text('{"lockfileVersion": 3}')
    (web / "src" / "main.tsx").write_text("export {}")
    return web


def built(dist: Path, *, older_than: Path | None = None) -> None:
    dist.mkdir(parents=True, exist_ok=True)
    for page in ("index.html", "graphiql.html"):
        (dist / page).write_text("<!doctype html>")
    if older_than is not None:
        then = older_than.stat().st_mtime - 10
        for page in ("index.html", "graphiql.html"):
            os.utime(dist / page, (then, then))


def installed(web: Path) -> None:
    (web / "node_modules").mkdir(exist_ok=True)
    (web / "node_modules" / LOCK_STAMP).write_text(build._lock_digest(web) + "\n")


def test_a_fresh_checkout_installs_and_builds(web: Path, tmp_path: Path) -> None:
    steps = plan(web, tmp_path / "dist")
    assert (steps.install, steps.build) == (True, True)
    assert "not built" in steps.reason


def test_an_up_to_date_build_does_nothing(web: Path, tmp_path: Path) -> None:
    installed(web)
    built(tmp_path / "dist")
    assert stale_reason(web, tmp_path / "dist") is None
    steps = plan(web, tmp_path / "dist")
    assert (steps.install, steps.build) == (False, False)


def test_a_source_newer_than_the_build_rebuilds_without_installing(
    web: Path, tmp_path: Path
) -> None:
    installed(web)
    built(tmp_path / "dist", older_than=web / "src" / "main.tsx")
    steps = plan(web, tmp_path / "dist")
    assert (steps.install, steps.build) == (False, True)
    assert steps.reason == "src/main.tsx changed since the last build"


def test_a_changed_lock_file_installs_again(web: Path, tmp_path: Path) -> None:
    installed(web)
    built(tmp_path / "dist")
    (web / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}')
    os.utime(web / "package-lock.json", (0, 0))  # even when its mtime says otherwise
    steps = plan(web, tmp_path / "dist")
    assert (steps.install, steps.build) == (True, True)
    assert steps.reason == "package-lock.json changed since the last install"


LOCK = {
    "lockfileVersion": 3,
    "packages": {
        "": {"name": "web"},
        "node_modules/vite": {"version": "7.0.0"},
        "node_modules/@rolldown/binding-darwin-arm64": {"version": "1.0.0", "optional": True},
    },
}


def npm_ci_by_hand(web: Path, packages: dict[str, object]) -> None:
    """What `npm ci` leaves: node_modules and npm's record of it, no stamp of ours."""
    (web / "node_modules").mkdir(exist_ok=True)
    hidden = {"lockfileVersion": 3, "packages": packages}
    (web / "node_modules" / ".package-lock.json").write_text(json.dumps(hidden))


def test_an_npm_ci_run_by_hand_is_not_run_again(web: Path, tmp_path: Path) -> None:
    """Issue 45: `npm --prefix web ci`, then `outlive dev`, ran `npm ci` a second time."""
    (web / "package-lock.json").write_text(json.dumps(LOCK))
    built(tmp_path / "dist")
    npm_ci_by_hand(web, {"node_modules/vite": {"version": "7.0.0"}})  # the optional one left out
    steps = plan(web, tmp_path / "dist")
    assert (steps.install, steps.build) == (False, False)


def test_an_install_of_another_lock_installs_again(web: Path, tmp_path: Path) -> None:
    (web / "package-lock.json").write_text(json.dumps(LOCK))
    built(tmp_path / "dist")
    npm_ci_by_hand(web, {"node_modules/vite": {"version": "6.3.0"}})
    assert plan(web, tmp_path / "dist").install is True
    npm_ci_by_hand(web, {})  # vite missing
    assert plan(web, tmp_path / "dist").install is True


def test_node_missing_or_too_old_is_one_clear_line(tmp_path: Path) -> None:
    assert "node not found" in str(node_problem(lambda name: None))
    old = tmp_path / "node"
    old.write_text("#!/bin/sh\necho v18.19.0\n")
    old.chmod(0o755)
    problem = node_problem(lambda name: str(old))
    assert problem is not None
    assert "v18.19.0 is too old" in problem
    assert "\n" not in problem


def test_without_node_and_without_a_build_outlive_dev_goes_on_without_the_app(
    web: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "node_problem", lambda: "node not found: install Node.js >= 20")
    build.ensure_built(web, tmp_path / "dist")  # returns: the API runs without the app
    out = capsys.readouterr().out.strip()
    assert out.startswith("web app: not built and cannot be (node not found")
    assert "\n" not in out
    assert not (tmp_path / "dist").exists()


def test_without_node_an_older_build_is_served(
    web: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    installed(web)
    built(tmp_path / "dist", older_than=web / "src" / "main.tsx")
    monkeypatch.setattr(build, "node_problem", lambda: "node not found")
    build.ensure_built(web, tmp_path / "dist")
    assert "serving the older build" in capsys.readouterr().out


def test_an_installed_package_without_sources_does_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build.ensure_built(tmp_path / "no-web", tmp_path / "dist")
    assert capsys.readouterr().out == ""
