"""docs/grafana/outlive.json only charts what Outlive exports, under the names and labels it
exports, and charts every family but the operator's own counters."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from outlive.telemetry import metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "outlive.json"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def exported() -> dict[str, tuple[str, set[str]]]:
    """series name -> (family, label names)"""
    found = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            name, kind = value._name, value._type  # type: ignore[attr-defined]
            labels = set(value._labelnames)  # type: ignore[attr-defined]
            for suffix in SUFFIXES[kind]:
                found[name + suffix] = (name, labels | ({"le"} if suffix == "_bucket" else set()))
    return found


def test_every_expression_names_exported_series_and_labels() -> None:
    series = exported()
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    charted = set()
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"]
            names = re.findall(r"\b(outlive_\w+)", expr)
            assert names, expr
            for name in names:
                assert name in series, f"{panel['title']}: {name} is not exported"
                family, labels = series[name]
                charted.add(family)
                for group in re.findall(r"by \(([^)]*)\)", expr):
                    used = {b.strip() for b in group.split(",")}
                    assert used <= labels, f"{panel['title']}: no label {used - labels}"
                for label in re.findall(r"\{(\w+)=", expr):
                    assert label in labels, f"{panel['title']}: no label {label}"
    families = {family for family, _ in series.values()}
    assert families - charted == {"outlive_jobs_redriven"}
