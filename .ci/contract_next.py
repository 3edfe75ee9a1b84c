"""Check the served schema against CONTRACT.md's round-five block (§4.2, "being built").

    uv run python .ci/contract_next.py

`contract_check.py` checks the built contract (§4 and §4.1) and fails on any breaking change;
`.ci/run` runs it as it is. Its `--next` mode adds §4.2, which is built issue by issue over the
round, so it lists what is not served yet. This script runs `--next` and holds its list against
`.ci/contract_pending.txt`, the §4.2 changes not built yet, each under the issue that builds it:

- a breaking change that is not in the file fails (something served broke, or §4.2 grew);
- a line of the file that is no longer reported fails too (it was built: delete the line), so
  the file only ever shrinks and always says what is left.

When the file is empty, `contract_check.py --next` passes on its own and this script is no
longer needed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PENDING = Path(__file__).with_name("contract_pending.txt")
CHECK = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "contract_check.py"


def pending() -> set[str]:
    lines = (line.strip() for line in PENDING.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("#")}


def reported(check: Path) -> set[str]:
    done = subprocess.run(
        [sys.executable, str(check), "--next"], capture_output=True, text=True, check=False
    )
    found = {
        line.removeprefix("BREAKING ").strip()
        for line in done.stdout.splitlines()
        if line.startswith("BREAKING ")
    }
    if done.returncode != 0 and not found:
        sys.exit(f"contract_next: contract_check.py failed:\n{done.stdout}{done.stderr}")
    return found


def main() -> int:
    check = Path(sys.argv[1]) if len(sys.argv) > 1 else CHECK
    if not check.is_file():
        print(f"warning: {check} not found; the round-five contract check is skipped")
        return 0
    now, left = reported(check), pending()
    broken, built = sorted(now - left), sorted(left - now)
    for change in broken:
        print(f"BREAKING (not pending): {change}")
    for change in built:
        print(f"built, delete from {PENDING.name}: {change}")
    print(f"contract_next: {len(now)} change(s) of §4.2 still pending, {len(broken)} unexpected")
    return 1 if broken or built else 0


if __name__ == "__main__":
    sys.exit(main())
