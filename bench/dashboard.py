"""The Grafana dashboard's panels, drawn from metrics scraped during a benchmark.

    uv run python bench/runs.py --scrape /tmp/scrapes.jsonl
    uv run python bench/dashboard.py /tmp/scrapes.jsonl docs/grafana/dashboard.png

Grafana cannot be installed here, so this does what Grafana and Prometheus would do, for the
few PromQL shapes `docs/grafana/outlive.json` uses: `Scraper` polls every `/metrics` target of the
benchmark once a second (as Prometheus would, into a JSON-lines file); `evaluate` computes each
panel's expressions over those samples (`rate()` over a window, `sum by (…)`, `max by (…)` and
`histogram_quantile()` with Prometheus's linear interpolation inside a bucket); `page` draws
every panel of the dashboard as an inline-SVG time series on one page, in the dashboard's order,
and Debian's Chromium (through Playwright, as tests/browser does) takes the picture.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import math
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docs" / "grafana" / "outlive.json"
CHROMIUM = "/usr/bin/chromium"

Labels = tuple[tuple[str, str], ...]
Sample = tuple[float, str, dict[str, float]]  # (time, target, {series key: value})


# --- scraping ---------------------------------------------------------------------------------


class Scraper:
    """Polls each target every `every_s` seconds, each from a thread of its own (so neither a
    busy target nor the benchmark's own event loop delays the others), appending what it read
    to `path`. A target that takes longer than `timeout_s` (as Prometheus's scrape timeout) is
    skipped for that round."""

    def __init__(self, path: Path, every_s: float = 1.0, timeout_s: float = 10.0) -> None:
        self.path = path
        self.every_s = every_s
        self.timeout_s = timeout_s
        self._stops: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.path.write_text("")

    def add(self, url: str) -> None:
        stop = self._stops[url] = threading.Event()
        threading.Thread(target=self._poll, args=(url, stop), daemon=True).start()

    def remove(self, url: str) -> None:
        stop = self._stops.pop(url, None)
        if stop is not None:
            stop.set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Scraper]:
        try:
            yield self
        finally:
            for url in list(self._stops):
                self.remove(url)

    def _poll(self, target: str, stop: threading.Event) -> None:
        with httpx.Client(timeout=self.timeout_s) as client:
            while not stop.is_set():
                began = time.time()
                self._scrape(client, target, began)
                stop.wait(max(0.0, self.every_s - (time.time() - began)))

    def _scrape(self, client: httpx.Client, target: str, began: float) -> None:
        # a process starting or stopping answers nothing, or not metrics: that round is skipped
        with contextlib.suppress(httpx.HTTPError, ValueError):
            response = client.get(target)
            if response.status_code != 200:
                return
            samples = [
                [s.name, s.labels, s.value]
                for family in text_string_to_metric_families(response.text)
                if family.name.startswith("outlive_")
                for s in family.samples
            ]
            line = json.dumps({"t": began, "target": target, "s": samples}) + "\n"
            with self._lock, self.path.open("a") as out:
                out.write(line)


def load(path: Path) -> dict[str, list[tuple[float, dict[Labels, float]]]]:
    """metric name -> [(time, {labels (with `target`): value})], one entry per scrape."""
    series: dict[str, dict[float, dict[Labels, float]]] = defaultdict(lambda: defaultdict(dict))
    for line in path.read_text().splitlines():
        scrape = json.loads(line)
        t = round(scrape["t"])  # targets scraped in one round share its second
        for name, labels, value in scrape["s"]:
            key = tuple(sorted({**labels, "target": scrape["target"]}.items()))
            series[name][t][key] = value
    return {name: sorted(by_time.items()) for name, by_time in series.items()}


# --- a little PromQL --------------------------------------------------------------------------

RATE = re.compile(r"^rate\((\w+)(?:\{([^}]*)\})?\[(\d+)m\]\)$")
SUM = re.compile(r"^(sum|max)(?: by \(([^)]*)\))? ?\((.*)\)$")
QUANTILE = re.compile(r"^histogram_quantile\(([\d.]+), (.*)\)$")
STALE_S = 10.0
SELECTOR = re.compile(r"^(\w+)(?:\{([^}]*)\})?$")


def _matchers(text: str | None) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text or ""))


def _selected(labels: Labels, matchers: dict[str, str]) -> bool:
    found = dict(labels)
    return all(found.get(k) == v for k, v in matchers.items())


def _instant(data: Any, expr: str, t: float) -> dict[Labels, float]:
    """One sub-expression at time `t`: a selector, or `rate()` of one."""
    if found := RATE.match(expr):
        name, matchers, minutes = found.group(1), _matchers(found.group(2)), int(found.group(3))
        return _rate(data.get(name, []), t, minutes * 60.0, matchers)
    if found := SELECTOR.match(expr):
        matchers = _matchers(found.group(2))
        return {
            k: v for k, v in _at(data.get(found.group(1), []), t).items() if _selected(k, matchers)
        }
    raise ValueError(f"unsupported expression: {expr}")


def _rate(
    points: list[tuple[float, dict[Labels, float]]],
    t: float,
    window: float,
    matchers: dict[str, str],
) -> dict[Labels, float]:
    """Per series: the increase between its first and last sample inside (t - window, t], over
    the time between them (Prometheus extrapolates to the window's edges; this does not)."""
    first: dict[Labels, tuple[float, float]] = {}
    last: dict[Labels, tuple[float, float]] = {}
    for when, values in points:
        if when > t:
            break
        if when <= t - window:
            continue
        for key, value in values.items():
            if _selected(key, matchers):
                first.setdefault(key, (when, value))
                last[key] = (when, value)
    out = {}
    for key, (t1, v1) in last.items():
        t0, v0 = first[key]
        if t1 > t0 and t - t1 < STALE_S:
            out[key] = max(0.0, v1 - v0) / (t1 - t0)
    return out


def _at(points: list[tuple[float, dict[Labels, float]]], t: float) -> dict[Labels, float]:
    """Each series' latest sample at or before `t`, unless older than `STALE_S` (a target that
    went away stops counting, as Prometheus marks it stale)."""
    best: dict[Labels, tuple[float, float]] = {}
    for when, values in points:
        if when > t:
            break
        for key, value in values.items():
            best[key] = (when, value)
    return {key: value for key, (when, value) in best.items() if t - when < STALE_S}


def _aggregate(how: str, values: dict[Labels, float], by: list[str]) -> dict[Labels, float]:
    """`sum by (…)` or `max by (…)`."""
    out: dict[Labels, float] = {}
    for key, value in values.items():
        labels = dict(key)
        group = tuple((b, labels.get(b, "")) for b in by)
        if group not in out:
            out[group] = value
        else:
            out[group] = out[group] + value if how == "sum" else max(out[group], value)
    return out


def _quantile(q: float, buckets: dict[Labels, float]) -> dict[Labels, float]:
    groups: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for key, count in buckets.items():
        labels = dict(key)
        bound = float(labels.pop("le"))
        groups[tuple(sorted(labels.items()))].append((bound, count))
    out = {}
    for key, pairs in groups.items():
        pairs.sort()
        total = pairs[-1][1]
        if total <= 0:
            continue
        rank, lower, below = q * total, 0.0, 0.0
        for bound, count in pairs:
            if count >= rank:
                if math.isinf(bound):
                    out[key] = lower
                else:
                    share = (rank - below) / (count - below) if count > below else 0
                    out[key] = lower + (bound - lower) * share
                break
            lower, below = bound, count
    return out


def evaluate(data: Any, expr: str, t: float) -> dict[Labels, float]:
    if found := QUANTILE.match(expr):
        return _quantile(float(found.group(1)), evaluate(data, found.group(2), t))
    if found := SUM.match(expr):
        by = [b.strip() for b in (found.group(2) or "").split(",") if b.strip()]
        return _aggregate(found.group(1), _instant(data, found.group(3), t), by)
    return _instant(data, expr, t)


def legend(template: str, key: Labels) -> str:
    labels = dict(key)
    return re.sub(r"\{\{(\w+)\}\}", lambda m: labels.get(m.group(1), ""), template) or "value"


# --- drawing ----------------------------------------------------------------------------------

COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]
W, H, LEFT, BOTTOM, TOP = 560, 190, 58, 20, 8
NO_DATA = "No data (not exercised by this benchmark)"
CSS = """
body { background:#111217; color:#ccccdc; font:13px 'DejaVu Sans', sans-serif; margin:16px;
       width:1180px; }
h1 { font-size:18px; margin:0 0 4px; color:#fff; } .note { color:#8e8e9e; margin-bottom:8px; }
h2 { grid-column:1/-1; font-size:14px; margin:10px 0 0; color:#fff; }
main { display:grid; grid-template-columns:1fr 1fr; gap:8px; }
section { background:#181b1f; border:1px solid #2c3235; border-radius:3px; padding:8px 10px; }
h3 { font-size:13px; margin:0 0 4px; color:#d8d9da; font-weight:500; }
svg { width:100%; display:block; } .grid { stroke:#2c3235; }
.axis { fill:#8e8e9e; font-size:10px; }
.nodata { fill:#8e8e9e; font-size:12px; text-anchor:middle; }
.legend { display:flex; flex-wrap:wrap; gap:4px 12px; font-size:11px; }
.legend i { display:inline-block; width:12px; height:3px; margin-right:4px; vertical-align:middle; }
.legend b { color:#8e8e9e; font-weight:400; }
"""


def _fmt(value: float, unit: str | None) -> str:
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"
    if unit == "ops":
        return f"{value:.0f}/s" if value >= 10 else f"{value:.1f}/s"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _lines(panel: dict[str, Any], data: Any, times: list[float]) -> dict[str, list[Any]]:
    lines: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for target in panel["targets"]:
        for t in times:
            for key, value in evaluate(data, target["expr"], t).items():
                if math.isfinite(value):
                    lines[legend(target["legendFormat"], key)].append((t, value))
    return lines


def _axes(top: float, unit: str | None, span: float) -> list[str]:
    out = []
    for i in range(5):
        y = TOP + (H - BOTTOM - TOP) * i / 4
        label = _fmt(top * (4 - i) / 4, unit)
        out.append(f'<line x1="{LEFT}" x2="{W}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">{label}</text>'
        )
    for m in range(0, int(span) + 1, 60):
        x = LEFT + (W - LEFT) * m / max(1.0, span)
        out.append(
            f'<text x="{x:.1f}" y="{H - 4}" class="axis" text-anchor="middle">{m // 60}m</text>'
        )
    return out


def _contiguous(points: list[tuple[float, float]]) -> list[list[tuple[float, float]]]:
    """Split a series where it has no data for more than a few seconds (no line across gaps)."""
    runs: list[list[tuple[float, float]]] = []
    for point in points:
        if runs and point[0] - runs[-1][-1][0] <= 3:
            runs[-1].append(point)
        else:
            runs.append([point])
    return runs


def panel_svg(panel: dict[str, Any], data: Any, times: list[float]) -> str:
    unit = panel["fieldConfig"]["defaults"].get("unit")
    lines = _lines(panel, data, times)
    if not lines:
        empty = f'<text x="{W / 2}" y="{H / 2}" class="nodata">{NO_DATA}</text>'
        return f'<svg viewBox="0 0 {W} {H}">{empty}</svg>'
    top = max(v for points in lines.values() for _, v in points) or 1.0
    t0, span = times[0], max(1.0, times[-1] - times[0])
    out = [f'<svg viewBox="0 0 {W} {H}">', *_axes(top, unit, span)]
    keys = []
    for n, (name, points) in enumerate(sorted(lines.items())[:8]):
        color = COLORS[n % len(COLORS)]
        for run in _contiguous(points):
            xs = (LEFT + (W - LEFT) * (t - t0) / span for t, _ in run)
            ys = (TOP + (H - BOTTOM - TOP) * (1 - v / top) for _, v in run)
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
            out.append(
                f'<polyline points="{path}" stroke="{color}" fill="none" stroke-width="1.6"/>'
            )
        peak = _fmt(max(v for _, v in points), unit)
        keys.append(
            f'<span><i style="background:{color}"></i>{html.escape(name)} <b>max {peak}</b></span>'
        )
    out.append("</svg>")
    return "".join(out) + f'<div class="legend">{"".join(keys)}</div>'


def page(dashboard: dict[str, Any], data: Any, note: str) -> str:
    stamps = sorted({t for points in data.values() for t, _ in points})
    times = [float(t) for t in range(int(stamps[0]) + 2, int(stamps[-1]) + 1)] if stamps else []
    blocks = []
    for panel in dashboard["panels"]:
        title = html.escape(panel["title"])
        if panel["type"] == "row":
            blocks.append(f"<h2>{title}</h2>")
        else:
            blocks.append(f"<section><h3>{title}</h3>{panel_svg(panel, data, times)}</section>")
    head = f'<h1>{html.escape(dashboard["title"])}</h1><div class="note">{html.escape(note)}</div>'
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><style>{CSS}</style></head>'
        f"<body>{head}<main>{''.join(blocks)}</main></body></html>"
    )


def screenshot(markup: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        view = browser.new_page(viewport={"width": 1212, "height": 900}, device_scale_factor=1)
        view.set_content(markup)
        view.screenshot(path=str(out), full_page=True)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scrapes", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    dashboard = json.loads(DASHBOARD.read_text())
    data = load(args.scrapes)
    if not data:
        sys.exit("no samples in the scrape file")
    note = args.note or (
        "Panels of docs/grafana/outlive.json, evaluated by bench/dashboard.py over /metrics "
        "scraped every second from every process of `bench/runs.py --scrape` (startRun on one, "
        "then two API processes; then end-to-end runs on one, then two workers)."
    )
    screenshot(page(dashboard, data, note), args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
