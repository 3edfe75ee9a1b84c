"""Building the web app for `outlive dev`: `web/` (TypeScript, Vite) into `outlive/web/dist`.

`ensure_built()` runs `npm ci` when `web/node_modules` is missing or `package-lock.json` changed
since the last install (its own, recorded in a stamp, or one run by hand: npm's record of what it
installed, `node_modules/.package-lock.json`, agrees with the lock file), then `npm run build` when the build is missing or older than its sources.
It prints one line saying what it does. Without Node.js (>= 20) it says so in one line and
carries on: an older build is served if there is one, else the API and GraphQL run without the app
(a bare machine with only Python and uv still gets `outlive dev`). A build that fails is a one-line
error. In an installed package
without the `web/` sources it does nothing: the wheel carries its build.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

DIST = Path(__file__).resolve().parent / "dist"
WEB_DIR = Path(__file__).resolve().parents[3] / "web"
MIN_NODE = 20
PAGES = ("index.html", "graphiql.html")
SOURCES = (
    "src",
    "public",
    "index.html",
    "graphiql.html",
    "vite.config.ts",
    "tsconfig.json",
    "package.json",
    "package-lock.json",
)
LOCK_STAMP = ".outlive-lock.sha256"  # in node_modules: the lock file `npm ci` last installed
INSTALL_HINT = "install Node.js >= 20 (with npm) from https://nodejs.org or your package manager"


class WebBuildError(RuntimeError):
    """The web app cannot be built here; the message is one line."""


@dataclass(frozen=True)
class Plan:
    install: bool
    build: bool
    reason: str


def _files(web_dir: Path) -> Iterator[Path]:
    for name in SOURCES:
        path = web_dir / name
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in path.rglob("*") if p.is_file())


def _lock_digest(web_dir: Path) -> str:
    lock = web_dir / "package-lock.json"
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else ""


def _installed_digest(web_dir: Path) -> str | None:
    stamp = web_dir / "node_modules" / LOCK_STAMP
    return stamp.read_text().strip() if stamp.is_file() else None


def _npm_installed_lock(web_dir: Path) -> bool:
    """Whether `node_modules` holds what `package-lock.json` pins, by npm's own record of what it
    installed (`node_modules/.package-lock.json`): every package at the lock's version, bar the
    optional ones it left out (other platforms' binaries). So an `npm ci` run by hand counts."""
    try:
        lock = json.loads((web_dir / "package-lock.json").read_text())
        hidden = json.loads((web_dir / "node_modules" / ".package-lock.json").read_text())
        wanted, found = lock["packages"], hidden["packages"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    for path, entry in wanted.items():
        if not path:
            continue  # the project itself
        have = found.get(path)
        if have is None:
            if not entry.get("optional"):
                return False
        elif have.get("version") != entry.get("version"):
            return False
    return all(path in wanted for path in found)


def stale_reason(web_dir: Path = WEB_DIR, dist: Path = DIST) -> str | None:
    """Why the build in `dist` does not match the sources in `web_dir`; None when it does."""
    pages = [dist / name for name in PAGES]
    missing = [p.name for p in pages if not p.is_file()]
    if missing:
        return f"{' and '.join(missing)} not built"
    built_at = min(p.stat().st_mtime for p in pages)
    newer = [p for p in _files(web_dir) if p.stat().st_mtime > built_at]
    if newer:
        return f"{newer[0].relative_to(web_dir)} changed since the last build"
    return None


def plan(web_dir: Path = WEB_DIR, dist: Path = DIST) -> Plan:
    """What `ensure_built` would do, and why."""
    installed = (web_dir / "node_modules").is_dir()
    install = not installed or (
        _installed_digest(web_dir) != _lock_digest(web_dir) and not _npm_installed_lock(web_dir)
    )
    reason = stale_reason(web_dir, dist)
    if install and reason is None:
        reason = "package-lock.json changed since the last install"
    return Plan(install=install, build=install or reason is not None, reason=reason or "")


def node_problem(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """Why Node.js cannot build the app here, or None."""
    node, npm = which("node"), which("npm")
    if node is None or npm is None:
        return f"{'node' if node is None else 'npm'} not found: {INSTALL_HINT}"
    try:
        out = subprocess.run(  # noqa: S603 (our own argv: the node found on PATH)
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return f"`node --version` failed: {INSTALL_HINT}"
    match = re.match(r"v?(\d+)", out.strip())
    if match is None or int(match.group(1)) < MIN_NODE:
        return f"Node.js {out.strip() or '?'} is too old: {INSTALL_HINT}"
    return None


def _npm(args: list[str], web_dir: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise WebBuildError(f"npm not found: {INSTALL_HINT}")
    result = subprocess.run(  # noqa: S603 (our own argv: npm on PATH, fixed arguments)
        [npm, *args], cwd=web_dir, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-30:]
        print("\n".join(tail), file=sys.stderr)  # noqa: T201
        raise WebBuildError(f"`npm {' '.join(args)}` failed in {web_dir} (output above)")


def build(web_dir: Path, steps: Plan) -> None:
    if steps.install:
        _npm(["ci", "--no-audit", "--no-fund", "--loglevel=error"], web_dir)
        (web_dir / "node_modules" / LOCK_STAMP).write_text(_lock_digest(web_dir) + "\n")
    if steps.build:
        _npm(["run", "build", "--silent"], web_dir)


def ensure_built(web_dir: Path = WEB_DIR, dist: Path = DIST) -> None:
    """Build `web/` into `dist` when the build is missing or stale (see the module docstring)."""
    if not (web_dir / "package.json").is_file():
        return  # an installed package: its build ships inside it
    steps = plan(web_dir, dist)
    if not steps.build:
        _say(f"web app: up to date ({_shown(dist)})")
        return
    problem = node_problem()
    if problem is not None:
        if all((dist / name).is_file() for name in PAGES):
            _say(f"web app: cannot rebuild ({problem}); serving the older build")
            return
        _say(
            f"web app: not built and cannot be ({problem}); the API and GraphQL run without it"
        )
        return
    doing = " and ".join(
        step
        for step, wanted in (("npm ci", steps.install), ("npm run build", steps.build))
        if wanted
    )
    _say(f"web app: {steps.reason}; running {doing} in {_shown(web_dir)} …")
    try:
        build(web_dir, steps)
    except WebBuildError as exc:
        _exit(str(exc))


def _say(line: str) -> None:
    print(line, flush=True)  # noqa: T201 (the one line `outlive dev` shows about the web app)


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _exit(message: str) -> NoReturn:
    print(f"outlive: error: {message}", file=sys.stderr)  # noqa: T201
    raise SystemExit(1)
