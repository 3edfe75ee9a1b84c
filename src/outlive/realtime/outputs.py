"""A run's partial output (`ctx.stream`), kept in one bounded Redis stream per run.

Partial output is display, never state: the journaled step is the truth, and a client that
missed chunks reads the step. So it lives in Redis only, apart from the nudges (which stay type
and id): each run has one Redis stream (`outlive:output:<run id>`) whose entries are the chunks
of all its named streams (`s`: the name, `t`: the text, `d`: "1" on the chunk that ends one).

- **Bounded.** `append` is one Lua script: the chunks are added, their bytes counted beside the
  stream, and the oldest entries deleted while the count is over `max_bytes`; both keys expire
  `keep_s` after the last write. So a run's output costs Redis at most about `max_bytes`, kept
  for `keep_s` after its stream ended.
- **Cursors.** A chunk's cursor is its Redis entry id. `read_after` reads the entries after a
  cursor (XRANGE from the next id), so a client that reconnects with its last cursor gets no
  chunk twice and misses none that is still kept.
- **Tails.** Readers of one run in one API process share one `Tail`: one blocking XREAD loop on
  one Redis connection, fanned out to every reader's queue. A reader joins the tail first and
  reads its backlog up to the tail's position second (no await between taking the position and
  joining), so nothing falls between the backlog and the live chunks, and nothing comes twice.
  The tail asks `settled()` when it starts and after each quiet second, beside its reads: the
  answer can take seconds (PostgreSQL busy with 500 sockets subscribing), live chunks never wait
  for it, and once it says yes the tail reads everything written before it, then ends every
  reader. (Asked before reading, a slow yes ended the readers without the chunks written while
  it was out: bench/streams.py lost the last 34 chunks for 457 of 500 readers that way.)
- **Joined.** What waits for a reader (its backlog, or the fan-outs that came while it was
  sending) goes out joined, a chunk per run of one stream's chunks of one kind and attempt
  (`_joined`): a reader that is behind catches up, where one frame per chunk had 500 readers fall
  further behind.
- **Kinds, attempts, resets.** Each chunk says what its text is (`k`: "text", "tool_call",
  "tool_result", "output") and which attempt wrote it (`a`). The script keeps, beside the stream,
  which attempt has each named stream open (written without its `done` yet): a chunk of another
  attempt for a stream still open is preceded by a `reset` chunk (`r`: "1", no text), which tells
  readers to drop what that stream showed (its attempt was abandoned: the worker died mid-step).
  A writer asks for one itself too (`StreamWriter.restart`: a call made again inside a step).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NamedTuple

from redis.asyncio import Redis
from redis.exceptions import RedisError

from outlive.config import Settings
from outlive.errors import QueryTimeout, ServiceUnavailable
from outlive.realtime.cursors import after, latest, newer

log = logging.getLogger(__name__)

BLOCK_MS = 1000  # a tail's XREAD waits this long before it asks whether the run settled
CHECK_MS = 50  # ... and this long while that question is out (its answer is looked at between)
PAGE = 500  # entries per XRANGE / XREAD
BACKLOG_READS = 8  # readers' backlog pages read at once in a process (a Redis connection each)
JOIN_MAX_CHARS = 64 * 1024  # waiting chunks of one stream are sent joined, up to this much text
ENTRY_OVERHEAD = 32  # bytes counted per entry beside its name and text

# KEYS: the stream, its byte count, its open streams (name -> the attempt writing it). ARGV: the
# byte bound, the expiry (ms), then per chunk: name, text, done, kind, attempt, reset.
_APPEND = """
local added = 0
local last = false
local function add(name, text, done, kind, attempt, reset)
  last = redis.call('XADD', KEYS[1], '*', 's', name, 't', text, 'd', done, 'k', kind,
                    'a', attempt, 'r', reset)
  added = added + string.len(name) + string.len(text) + 32
end
for i = 3, #ARGV, 6 do
  local name, text, done = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local kind, attempt, reset = ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]
  local open = redis.call('HGET', KEYS[3], name)
  if reset ~= '1' and open and open ~= attempt then
    add(name, '', '0', 'text', attempt, '1')
  end
  add(name, text, done, kind, attempt, reset)
  if done == '1' then
    redis.call('HDEL', KEYS[3], name)
  else
    redis.call('HSET', KEYS[3], name, attempt)
  end
end
local size = redis.call('INCRBY', KEYS[2], added)
local max = tonumber(ARGV[1])
while size > max do
  local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if #oldest == 0 then
    redis.call('SET', KEYS[2], 0)
    break
  end
  local fields = oldest[1][2]
  redis.call('XDEL', KEYS[1], oldest[1][1])
  size = redis.call('DECRBY', KEYS[2], string.len(fields[2]) + string.len(fields[4]) + 32)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return last
"""

TEXT = (
    "text"  # the kind of a chunk that says nothing else (and of every chunk written before kinds)
)


class Piece(NamedTuple):
    """A chunk to append: `(stream, text, done)`, and its kind, the attempt that writes it and
    whether it is a reset."""

    stream: str
    text: str
    done: bool
    kind: str = TEXT
    attempt: int = 0
    reset: bool = False


@dataclass(frozen=True, slots=True)
class Chunk:
    """One entry of a run's output: `cursor` is its Redis entry id."""

    cursor: str
    stream: str
    text: str
    done: bool
    kind: str = TEXT
    attempt: int = 0
    reset: bool = False


def output_key(run_id: object) -> str:
    return f"outlive:output:{{{run_id}}}"  # a hash tag: one slot for a run's keys


def _size_key(run_id: object) -> str:
    return f"outlive:output:{{{run_id}}}:bytes"


def _open_key(run_id: object) -> str:
    return f"outlive:output:{{{run_id}}}:open"


def keys_of(run_id: object) -> tuple[str, ...]:
    """Every key a run's output keeps (erased with the run: `eraseSubject`)."""
    return output_key(run_id), _size_key(run_id), _open_key(run_id)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _chunk(entry_id: bytes | str, fields: dict[Any, Any]) -> Chunk:
    get = {_text(k): _text(v) for k, v in fields.items()}
    attempt = get.get("a", "0")
    return Chunk(
        _text(entry_id),
        get.get("s", ""),
        get.get("t", ""),
        get.get("d") == "1",
        get.get("k") or TEXT,
        int(attempt) if attempt.isdigit() else 0,
        get.get("r") == "1",
    )


class OutputStore:
    """Writes and reads runs' output streams on one Redis client."""

    def __init__(self, redis: Redis, *, max_bytes: int, keep_s: float) -> None:
        self.redis = redis
        self.max_bytes = max_bytes
        self.keep_ms = max(1, int(keep_s * 1000))
        self._append = redis.register_script(_APPEND)

    @classmethod
    def of(cls, redis: Redis, settings: Settings) -> OutputStore:
        return cls(redis, max_bytes=settings.stream_max_bytes, keep_s=settings.stream_keep_s)

    async def append(self, run_id: object, chunks: Sequence[tuple[Any, ...]]) -> str | None:
        """Add chunks (`Piece`s, or `(stream, text, done)`) in order; the last one's cursor. A
        chunk of another attempt than the one that left its stream open goes after a reset."""
        if not chunks:
            return None
        args: list[Any] = [self.max_bytes, self.keep_ms]
        for chunk in chunks:
            p = chunk if isinstance(chunk, Piece) else Piece(*chunk)
            done, reset = "1" if p.done else "0", "1" if p.reset else "0"
            args.extend((p.stream, p.text, done, p.kind, str(p.attempt), reset))
        keys = [output_key(run_id), _size_key(run_id), _open_key(run_id)]
        last = await self._append(keys=keys, args=args)
        return None if not last else _text(last)

    async def read_after(
        self, run_id: object, cursor: str | None, *, until: str = "+", count: int = PAGE
    ) -> list[Chunk]:
        """Up to `count` chunks after `cursor` (None: from the oldest kept), up to `until`."""
        start = "-" if cursor is None else after(cursor)
        entries = await self.redis.xrange(output_key(run_id), start, until, count=count)
        return [_chunk(entry_id, fields) for entry_id, fields in entries]

    async def last_cursor(self, run_id: object) -> str:
        """The newest entry's id ("0-0" when there is none)."""
        entries = await self.redis.xrevrange(output_key(run_id), "+", "-", count=1)
        return _text(entries[0][0]) if entries else "0-0"


_END = object()  # a reader's queue: the run settled, nothing more comes


class Tail:
    """The live chunks of one run for the readers of one process (see the module's docstring)."""

    def __init__(
        self,
        store: OutputStore,
        run_id: object,
        settled: Callable[[], Awaitable[bool]],
        *,
        on_idle: Callable[[Tail], None],
        owner: object = None,
    ) -> None:
        self.store, self.run_id, self._settled, self._on_idle = store, run_id, settled, on_idle
        self.owner = owner  # whose run it was found to be when the tail began (its tenant)
        self.position: str | None = None  # the newest id handed to the readers
        self.readers: set[asyncio.Queue[object]] = set()
        self.ready = asyncio.Event()
        self.ended = False
        self.task = asyncio.get_running_loop().create_task(self._loop(), name=f"tail-{run_id}")

    async def _loop(self) -> None:
        check: asyncio.Task[bool] | None = None
        try:
            self.position = await self.store.last_cursor(self.run_id)
            self.ready.set()
            check = self._check()  # a run that settled already: its backlog is all there is
            while self.readers and not self.ended:
                if check is not None and check.done():
                    if self._answer(check):  # whatever came before the answer is read first
                        while await self._read(block_ms=None):
                            pass
                        self._end(_END)
                        break
                    check = None
                found = await self._read(block_ms=BLOCK_MS if check is None else CHECK_MS)
                if not found and check is None:  # a quiet second: has the run settled?
                    check = self._check()
        except (RedisError, OSError) as exc:
            log.warning("run %s: its output stream cannot be read (%r)", self.run_id, exc)
            self._end(_unreadable())
        finally:
            if check is not None:
                check.cancel()
            if not self.ended:  # broken by anything else: no reader waits for a gone tail
                self._end(_unreadable())
            self.ready.set()
            self._on_idle(self)

    def _check(self) -> asyncio.Task[bool]:
        """Ask whether the run settled, beside the reads: the answer can take seconds when
        PostgreSQL is busy (500 readers subscribing), and live chunks must not wait for it."""
        return asyncio.get_running_loop().create_task(self._ask(), name=f"settled-{self.run_id}")

    async def _ask(self) -> bool:
        return await self._settled()

    def _answer(self, check: asyncio.Task[bool]) -> bool:
        """A finished check's answer; PostgreSQL unreachable or too slow reads as not settled
        (asked again after the next quiet second)."""
        try:
            return check.result()
        except (ServiceUnavailable, QueryTimeout) as exc:  # PostgreSQL down, or swamped
            log.warning("run %s: cannot tell whether it settled (%s)", self.run_id, exc.message)
            return False

    async def _read(self, *, block_ms: int | None) -> bool:
        """XREAD after the position (waiting up to `block_ms`; None: not at all), fanned out."""
        assert self.position is not None  # noqa: S101 (set before the loop)
        found = await self.store.redis.xread(
            {output_key(self.run_id): self.position},
            count=PAGE,
            block=block_ms,
        )
        chunks = [_chunk(i, f) for _, entries in found or () for i, f in entries]
        if chunks:  # no await from here to the fan-out: a joining reader sees one position
            self.position = chunks[-1].cursor
            for queue in self.readers:
                queue.put_nowait(chunks)
        return bool(chunks)

    def _end(self, why: object) -> None:
        self.ended = True
        for queue in self.readers:
            queue.put_nowait(why)


class OutputTails:
    """The tails of one API process, one per run being read."""

    def __init__(self, store: OutputStore) -> None:
        self.store = store
        self._tails: dict[object, Tail] = {}
        self._lookups: dict[tuple[object, object], asyncio.Future[bool]] = {}
        self._backlog_reads = asyncio.Semaphore(BACKLOG_READS)

    def __len__(self) -> int:
        return len(self._tails)

    async def owned(
        self, run_id: object, owner: object, lookup: Callable[[], Awaitable[bool]]
    ) -> bool:
        """Whether run `run_id` is `owner`'s (its tenant's). Known when a live tail of it began
        for `owner` (the run was found to be `owner`'s then, and a run never changes hands);
        otherwise `lookup()`, one at a time per run and owner: the readers that ask meanwhile
        share its answer. 500 sockets subscribing at once made 500 reads of one row, queued on
        PostgreSQL's pool for seconds before any reader got a chunk."""
        tail = self._tails.get(run_id)
        if tail is not None and not tail.ended and owner is not None and tail.owner == owner:
            return True
        key = (run_id, owner)
        pending = self._lookups.get(key)
        if pending is None:
            pending = self._lookups[key] = asyncio.ensure_future(lookup())
            pending.add_done_callback(partial(self._looked_up, key))
        return await asyncio.shield(pending)  # a reader that leaves ends no one else's wait

    def _looked_up(self, key: tuple[object, object], done: asyncio.Future[bool]) -> None:
        self._lookups.pop(key, None)
        if not done.cancelled():
            done.exception()  # retrieved here too: its readers may all have left

    async def follow(
        self,
        run_id: object,
        after: str | None,
        settled: Callable[[], Awaitable[bool]],
        *,
        owner: object = None,
    ) -> AsyncIterator[Chunk]:
        """The chunks after `after` still kept, then live ones, until the run settled. `owner`:
        whose the run was found to be (see `owned`)."""
        tail = self._tails.get(run_id)
        if tail is None or tail.ended:
            tail = Tail(self.store, run_id, settled, on_idle=self._idle, owner=owner)
            self._tails[run_id] = tail
        queue: asyncio.Queue[object] = asyncio.Queue()
        tail.readers.add(queue)
        try:
            await tail.ready.wait()
            position = tail.position  # read with the join: the tail sends what comes after it
            cursor = after
            while position is not None and position != "0-0":
                page = await self._read_after(run_id, cursor, position)
                for chunk in _joined(page):
                    yield chunk
                if len(page) < PAGE:
                    break
                cursor = page[-1].cursor
            last = after if position is None else latest(after, position)
            while True:
                items = [await queue.get()]
                while not queue.empty():  # behind the tail: what waits goes out joined
                    items.append(queue.get_nowait())
                chunks = [c for i in items if isinstance(i, list) for c in i]
                for chunk in _joined(c for c in chunks if newer(c.cursor, last)):
                    yield chunk
                if items[-1] is _END:  # the tail puts nothing after its end
                    return
                if isinstance(items[-1], BaseException):
                    raise items[-1]
        finally:
            tail.readers.discard(queue)
            if not tail.readers and not tail.ended:
                tail.ended = True  # a reader that comes now starts a tail of its own
                self._idle(tail)
                tail.task.cancel()

    async def _read_after(self, run_id: object, cursor: str | None, until: str) -> list[Chunk]:
        """A page of a reader's backlog, `BACKLOG_READS` at most at once in the process: each
        read in flight holds a Redis connection, and 500 readers joining at once opened
        hundreds, until connecting took over redis-py's 3 s and readers got errors."""
        try:
            async with self._backlog_reads:
                return await self.store.read_after(run_id, cursor, until=until)
        except (RedisError, OSError) as exc:
            log.warning("run %s: its output backlog cannot be read (%r)", run_id, exc)
            raise _unreadable() from exc

    def _idle(self, tail: Tail) -> None:
        if self._tails.get(tail.run_id) is tail:
            del self._tails[tail.run_id]


def _unreadable() -> ServiceUnavailable:
    """What a reader gets when Redis fails it: SERVICE_UNAVAILABLE (resubscribe with `after`)."""
    return ServiceUnavailable("the run's output cannot be read now")


def _joined(chunks: Iterable[Chunk]) -> list[Chunk]:
    """Adjacent chunks of one stream, kind and attempt as one (up to `JOIN_MAX_CHARS` of text; a
    `done` ends it, a reset stands alone),
    with the last one's cursor: a reader that is behind (a backlog, a slow socket, a busy
    process) catches up in a few frames instead of falling further behind by one per chunk."""
    groups: list[list[Chunk]] = []
    size = 0
    for chunk in chunks:
        group = groups[-1] if groups else None
        if (
            group is None
            or group[-1].done
            or group[-1].reset
            or chunk.reset
            or (group[-1].stream, group[-1].kind, group[-1].attempt)
            != (chunk.stream, chunk.kind, chunk.attempt)
            or size + len(chunk.text) > JOIN_MAX_CHARS
        ):
            groups.append([chunk])
            size = len(chunk.text)
        else:
            group.append(chunk)
            size += len(chunk.text)
    return [
        g[0] if len(g) == 1 else replace(g[-1], text="".join(c.text for c in g)) for g in groups
    ]
