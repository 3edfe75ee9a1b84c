"""The size rule CI keeps (issue 25): a module in src/ is at most 450 lines, a function at most
60 lines, except the functions named in ALLOWED below, each with its reason. And the run's state
machine in one room: only `services/runs/` (and the PL/pgSQL in `db/functions/*.sql`) write
`UPDATE runs` or `INSERT INTO run_events`.

Why a rule: the structural steps so far each split a module that had grown past what one reads
in a sitting, and the first feature after each step grew one back. A size is a proxy, so the
rule is only a floor under the review: a module that is over is split by what it does, not cut
in two. A function's size counts its decorators, signature, docstring and body.

Usage: `python .ci/size_check.py [root]` (root: the repository, default the current
directory). Prints every breach; exits 1 when there is one.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60

# "path/in/src.py:qualified.name" -> why it may be longer. Keep this short: a table that reads
# best as one piece, not a function that does several things.
ALLOWED: dict[str, str] = {
    "outlive/cli/__init__.py:_parser": (
        "the argparse table of every command and option: one declaration per line, no logic"
    ),
}


def _functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, child))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


# The run's state machine in one room (issue 25): every statement that moves a run or appends to
# its timeline is a named move in `services/runs/`; the SQL functions are the only other writers.
STATE_WRITES = re.compile(r"UPDATE\s+runs\b|INSERT\s+INTO\s+run_events\b", re.IGNORECASE)
STATE_ROOM = "outlive/services/runs/"


def state_writes(src: Path) -> list[str]:
    """Every write to `runs` or `run_events` outside `services/runs/` (Python in src/)."""
    out: list[str] = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel.startswith(STATE_ROOM):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if STATE_WRITES.search(line):
                out.append(
                    f"src/{rel}:{number}: writes the run's state outside services/runs/: make it"
                    " a move there (`services.runs`), and call it"
                )
    return out


def breaches(src: Path) -> list[str]:
    out: list[str] = []
    seen_allowed: set[str] = set()
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            out.append(f"src/{rel}: {lines} lines (at most {MAX_MODULE_LINES}): split it")
        for name, fn in _functions(ast.parse(text, filename=str(path))):
            first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            size = (fn.end_lineno or fn.lineno) - first + 1
            key = f"{rel}:{name}"
            if key in ALLOWED:
                seen_allowed.add(key)
                continue
            if size > MAX_FUNCTION_LINES:
                out.append(
                    f"src/{rel}:{fn.lineno}: {name} is {size} lines (at most "
                    f"{MAX_FUNCTION_LINES}): split it, or name it in ALLOWED with a reason"
                )
    for key in sorted(set(ALLOWED) - seen_allowed):
        out.append(f".ci/size_check.py: ALLOWED names {key}, which no longer exists")
    return out


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path()
    found = breaches(root / "src") + state_writes(root / "src")
    for line in found:
        sys.stdout.write(f"{line}\n")
    if found:
        sys.stderr.write(f"size rule: {len(found)} breach(es)\n")
        return 1
    sys.stdout.write("size rule: modules and functions within bounds; runs written in one room\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
