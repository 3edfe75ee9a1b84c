"""The noisy-neighbour bench's phases and its two tables (`bench/fairness.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from _common import table
from _fairness_probe import SEGMENTS, pct


@dataclass
class Phase:
    name: str
    quiet_ms: list[float]  # start-to-claim of each quiet run
    noisy_per_s: float | None
    parts: dict[str, list[float]] | None = None  # where the quiet runs' time went (ms)
    lag_ms: tuple[float | None, float | None, float] = (None, None, 0.0)  # workers' p50, p99
    gc2: tuple[float, float] = (0.0, 0.0)  # the workers' full collections: count, seconds
    waves: float | None = None  # the flood's claims within 10 ms of each, median (`in_waves`)

    def quiet(self, q: float) -> float | None:
        return pct(self.quiet_ms, q)


def report(phases: list[Phase]) -> str:
    idle, alone = phases[0], phases[1]
    rows = []
    for p in phases:
        p50, p99 = p.quiet(0.5), p.quiet(0.99)
        rows.append(
            [
                p.name,
                len(p.quiet_ms) or "",
                "" if p50 is None else f"{p50:.1f}",
                "" if p99 is None else f"{p99:.1f}",
                "" if p99 is None or p is idle else f"{p99 / (idle.quiet(0.99) or 1):.2f}x",
                "" if p.noisy_per_s is None else f"{p.noisy_per_s:.0f}",
                ""
                if p.noisy_per_s is None or p is alone or alone.noisy_per_s is None
                else f"{p.noisy_per_s / alone.noisy_per_s:.0%}",
            ]
        )
    header = ["phase", "quiet runs", "p50 ms", "p99 ms", "p99 vs idle", "noisy runs/s", "vs alone"]
    return table(rows, header)


def breakdown(phases: list[Phase]) -> str:
    """Where the quiet runs' start-to-claim went (p50 / p99 of each segment), and the workers'
    event-loop lag over the phase."""
    rows = []
    for p in phases:
        lag50, lag99, ticks = p.lag_ms
        cells: list[object] = [p.name]
        for name in SEGMENTS:
            got = (p.parts or {}).get(name, [])
            cells.append("" if not got else f"{pct(got, 0.5):.1f} / {pct(got, 0.99):.1f}")
        cells.append("" if lag99 is None else f"<={lag50:g} / <={lag99:g} ({ticks:.0f} ticks)")
        count, seconds = p.gc2
        cells.append(f"{count:.0f}, {seconds * 1000 / count:.0f} ms each" if count else "0")
        cells.append("" if p.waves is None else f"{p.waves:.0f}")
        rows.append(cells)
    header = [
        "phase",
        *(f"{s} p50/p99 ms" for s in SEGMENTS),
        "worker loop lag p50/p99 ms",
        "workers' full GCs",
        "flood's claims within 10 ms of each (median)",
    ]
    return table(rows, header)
