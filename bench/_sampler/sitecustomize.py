"""A wall-clock stack sampler for bench processes, where py-spy cannot attach (this machine's
Python is a static build py-spy cannot read). Put this directory on PYTHONPATH and set
OUTLIVE_BENCH_SAMPLE_DIR: every Python process whose command line names `worker` then samples its
main thread's stack every millisecond and writes `<dir>/<pid>.folded` (one `frame;frame;… count`
line per stack, flamegraph's folded format) when it exits."""

from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time

_DIR = os.environ.get("OUTLIVE_BENCH_SAMPLE_DIR")


def _frames(frame: object) -> str:
    names = []
    while frame is not None:
        code = frame.f_code  # type: ignore[attr-defined]
        path = code.co_filename
        short = path.split("site-packages/")[-1].split("/src/")[-1]
        names.append(f"{short}:{code.co_name}")
        frame = frame.f_back  # type: ignore[attr-defined]
    return ";".join(reversed(names))


def _start(folder: str) -> None:
    counts: collections.Counter[str] = collections.Counter()
    main = threading.main_thread().ident
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            frame = sys._current_frames().get(main)  # noqa: SLF001
            if frame is not None:
                counts[_frames(frame)] += 1
            time.sleep(0.001)

    thread = threading.Thread(target=sample, name="bench-sampler", daemon=True)
    thread.start()

    def write() -> None:
        stop.set()
        with open(os.path.join(folder, f"{os.getpid()}.folded"), "w") as out:
            for stack, n in counts.most_common():
                out.write(f"{stack} {n}\n")

    atexit.register(write)


if _DIR and any("worker" in arg for arg in sys.argv):
    _start(_DIR)
