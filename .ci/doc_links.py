"""The documentation stands alone: every link in README.md, SECURITY.md and docs/ stays inside the
repository, and every link of README.md and SECURITY.md reaches a file (and heading) that exists.

    uv run python .ci/doc_links.py

mkdocs checks the links between pages of docs/ (`mkdocs build --strict`); the two files at the
root are not part of the site, so they are checked here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from markdown.extensions.toc import slugify  # type: ignore[import-untyped]  # mkdocs's markdown, no stubs

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in HEADING.findall(text)}


def problems(path: Path, *, resolve: bool) -> list[str]:
    found = []
    for target in links(path):
        where = f"{path.relative_to(ROOT)}: {target}"
        if re.match(r"[a-z]+:", target):
            found.append(f"{where}: points outside the repository")
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.is_relative_to(ROOT):
            found.append(f"{where}: points outside the repository")
        elif resolve and not dest.exists():
            found.append(f"{where}: no such file")
        elif resolve and anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            found.append(f"{where}: no such heading")
    return found


def main() -> int:
    found = problems(ROOT / "README.md", resolve=True)
    found += problems(ROOT / "SECURITY.md", resolve=True)
    for page in sorted((ROOT / "docs").rglob("*.md")):
        found += problems(page, resolve=False)
    for line in found:
        print(line)  # noqa: T201
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
