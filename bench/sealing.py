"""Benchmark: what encryption at rest costs a step result (issue 46, `services.sealing`).

    uv run python bench/sealing.py [--repeat 200]

In-process, no database: for results of 1 KiB, 64 KiB, 256 KiB and 2 MiB of JSON text, the
median time to seal one (AES-256-GCM under the tenant's data key, base64 in a `{"$enc": ...}`
envelope: what a step's commit adds) and to open it (what a memo hit or a GraphQL read adds),
beside the floor of `json.loads` of the same text (what every read does anyway), and the bytes
stored for the plaintext's. The other cost, one `SELECT` of the tenant's wrapped key per
attempt and per GraphQL request that reads step results, is one indexed primary-key read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from functools import partial

from outlive.services import sealing

SIZES = {"1 KiB": 1024, "64 KiB": 64 * 1024, "256 KiB": 256 * 1024, "2 MiB": 2 * 1024 * 1024}


def median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    kek = sealing.deployment_key(sealing.new_deployment_key())
    cipher = type(kek)(sealing.unwrap(kek, sealing.wrap(kek, os.urandom(32))))
    print("| result | seal | open | json.loads (floor) | stored / plaintext bytes |")
    print("|---|---|---|---|---|")
    for label, size in SIZES.items():
        value = json.dumps({"text": os.urandom(size // 2).hex()[: size - 12]})
        sealed = sealing.seal(cipher, value)
        seal = median_us(partial(sealing.seal, cipher, value), args.repeat)
        opened = median_us(partial(sealing.open_text, cipher, sealed), args.repeat)
        floor = median_us(partial(json.loads, value), args.repeat)
        ratio = len(sealed) / len(value)
        print(f"| {label} | {seal:,.0f} us | {opened:,.0f} us | {floor:,.0f} us | {ratio:.3f} |")


if __name__ == "__main__":
    main()
