"""Redis clients: one Redis, or a Redis Cluster (Valkey cluster), from `REDIS_URL`.

`redis://h:6379/0` (or `rediss://`, `unix://`) is one Redis: redis-py's `Redis`, as always.
`redis+cluster://h1:7000,h2:7001/` (or `rediss+cluster://`; or a plain URL with
`OUTLIVE_REDIS_CLUSTER=1`, which `Settings.queue_url` turns into that form) is a cluster:
redis-py's `RedisCluster`, started from those nodes, following MOVED/ASK and failovers itself.

On a cluster every command or script must touch keys of one hash slot. Outlive's keys are made
so: each set of keys one command or script touches shares a hash tag (`{…}`):

- a saq queue's keys and its jobs' keys carry the queue's name, which is a hash tag
  (`{outlive-runs-0}`: `outlive.jobs.partitions`);
- a tenant's rate-limit buckets share the tenant (`outlive:rate:{tenant}:…`), a named limit's
  buckets the limit (`outlive:limit:{llm}:…`: the global bucket and every tenant's are taken in
  one script), a run's output stream keys the run (`outlive:output:{run}`);
- the relay's marker is one key per queue partition, in that partition's slot, so the loss of
  any master's data is seen.

Classic pub/sub (saq's job notifications, the control channel) reaches every node of a cluster;
nudges use sharded pub/sub there (`outlive.realtime.links`).
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import (
    AbstractStrategy,
    ClusterNode,
    ClusterPipeline,
    RedisCluster,
    TransactionStrategy,
)
from redis.commands.core import AsyncScript
from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot
from redis.exceptions import ConnectionError, NoScriptError, RedisClusterException

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def as_cluster_url(url: str) -> str:
    """`OUTLIVE_REDIS_CLUSTER=1`: a plain `redis://` URL names a cluster node."""
    scheme, _, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES or scheme not in CLUSTER_SCHEMES.values():
        return url
    return f"{scheme}+cluster://{rest}"


def node_url(url: str) -> str:
    """The plain URL of the first node a cluster URL names (its user and password kept); a
    plain URL as it is."""
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        return url
    credentials, _, hosts = parts.netloc.rpartition("@")
    first = hosts.split(",")[0]
    netloc = f"{credentials}@{first}" if credentials else first
    return f"{CLUSTER_SCHEMES[parts.scheme]}://{netloc}{parts.path or '/'}"


class OutliveCluster(RedisCluster):
    """redis-py's async cluster client, with the classic pub/sub it lacks (`publish`, and the
    `pubsub()` saq's queue asks for): on one node, which a cluster broadcasts to (and from)
    every node. Announcements to API processes (revocations) go that way."""

    def __init__(self, *args: Any, subscribe_url: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subscribe_url = subscribe_url

    async def initialize(self) -> OutliveCluster:
        """redis-py's, but a cluster it cannot reach (no node answers, or the slots are not all
        covered) raises `ConnectionError`, a `RedisError`, as one Redis down does. redis-py
        raises `RedisClusterException`, which is no `RedisError`: every `except RedisError`
        that degrades (the producer's `QueueUnavailable`, the limits, nudges) let it through,
        and a mutation failed with an internal error where the relay would have sent its job."""
        try:
            await super().initialize()
        except RedisClusterException as exc:
            raise ConnectionError(f"the Redis Cluster cannot be reached: {exc}") from exc
        return self

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """redis-py's, once the client knows the cluster: redis-py chooses how to route a
        command before it learns the slots, and a client that does not know them yet (new, or
        closed by redis-py itself to re-learn them) sent a keyed command without a routing
        flag of its own (`EVALSHA`: every queue script) to a random node, which answered MOVED;
        at every fifth MOVED redis-py closes the client again."""
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)

    def pubsub(self, **kwargs: Any) -> PubSub:
        return Redis.from_url(self.subscribe_url).pubsub(**kwargs)

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> ClusterPipeline:
        pipe = super().pipeline(transaction, shard_hint)
        if transaction:
            pipe._execution_strategy = _KeyedTransaction(pipe)
        return pipe

    def register_script(self, script: Any) -> Any:  # redis-py types it for one Redis
        return _NodeScript(cast(Redis, self), script)

    async def publish(self, channel: str | bytes, message: str | bytes, **kwargs: Any) -> int:
        """On the node `pubsub()` subscribes on (the URL's first), which API processes hold the
        control channel on: a cluster carries a PUBLISH to every node but counts the receivers
        of the node it was sent to only (on a random node, `outlive token revoke` said "0 API
        process(es)" five times in six)."""
        await self.initialize()
        where = urlsplit(self.subscribe_url)
        node = self.get_node(where.hostname, where.port or 6379) or self.get_random_node()
        return int(await self.execute_command("PUBLISH", channel, message, target_nodes=node))


# Commands whose first argument is their (first) key: their slot is known without asking.
_FIRST_KEY = frozenset(
    b"DEL DELETE EXPIRE GET HDEL HSET INCR INCRBY LPUSH LREM PEXPIRE RPUSH SET SETEX UNLINK ZADD"
    b" ZREM".split()
)


class _KeyedTransaction(TransactionStrategy):
    """redis-py's transaction on a cluster (`pipeline(transaction=True)`: MULTI/EXEC on the node
    of the commands' one slot), without a thread per command. redis-py 7 queues each command of
    such a pipeline by running its async slot lookup in a new thread with its own event loop
    (`asyncio.run`), joined at once: saq finishes every job with three of them (LREM, ZREM,
    SETEX), and a profile of `bench/cluster.py` put about a third of the worker's Redis time in
    those threads. A command whose first argument is its key has its slot computed here; any
    other (WATCH, scripts, an unknown command) takes redis-py's path."""

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        name = args[0].encode() if isinstance(args[0], str) else args[0]
        client = self._pipe.cluster_client
        if name.upper() not in _FIRST_KEY or self._watching or client._initialize:
            return super().execute_command(*args, **kwargs)
        self._pipeline_slots.add(client.keyslot(args[1]))
        return AbstractStrategy.execute_command(self, *args, **kwargs)


class _NodeScript(AsyncScript):
    """A Lua script on a cluster: EVALSHA, and EVAL when the node does not know it. redis-py's
    own retry loads it with SCRIPT LOAD on every master its map lists, which fails while that map
    still names a master lost moments ago (and a promoted replica has an empty script cache): the
    queue's scripts failed that way until the map was refreshed. EVAL is routed by the keys, as
    EVALSHA is, and leaves the script cached on that node."""

    async def __call__(self, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        keys, args = list(keys or []), list(args or [])
        client = self.registered_client if client is None else client
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.script, len(keys), *keys, *args)


def create_redis(url: str, **kwargs: Any) -> Redis:
    """A client for `url`: a `Redis`, or an `OutliveCluster` for a cluster URL (typed as
    `Redis`: the commands Outlive sends are the same on both)."""
    options = {"socket_connect_timeout": 3, "health_check_interval": 30, **kwargs}
    if not is_cluster_url(url):
        return Redis.from_url(url, **options)
    if options.get("max_connections") is None:  # a cluster's is per node, and an int
        options.pop("max_connections", None)
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    user, _, password = credentials.partition(":")
    nodes = []
    for host in hosts.split(","):
        name, _, port = host.rpartition(":")
        nodes.append(ClusterNode(name or host, int(port) if name else 6379))
    cluster = OutliveCluster(
        startup_nodes=nodes,
        username=unquote(user) or None,
        password=unquote(password) or None,
        ssl=parts.scheme.startswith("rediss"),
        subscribe_url=node_url(url),
        **options,
    )
    return cast(Redis, cluster)


def is_cluster(redis: object) -> bool:
    return isinstance(redis, RedisCluster)


def queue_names(base: str, partitions: int, *, cluster: bool) -> list[str]:
    """The saq queue names of a queue spread over `partitions`: each one a hash tag, so a queue's
    keys (and its jobs') share a slot; partition i of P lands in the i-th P-th of the slots, so
    on a cluster whose masters split the slots evenly (`redis-cli --cluster create`) P = the
    number of masters puts one partition on each. One partition on one Redis keeps its old
    name (and so its keys)."""
    if partitions == 1 and not cluster:
        return [base]
    return ["{" + _slotted_tag(base, i, partitions) + "}" for i in range(partitions)]


def _slotted_tag(base: str, index: int, partitions: int) -> str:
    low, high = index * SLOTS // partitions, (index + 1) * SLOTS // partitions
    tag, attempt = f"{base}-{index}", 0
    while not low <= key_slot(tag.encode()) < high:
        attempt += 1
        tag = f"{base}-{index}-{attempt}"
    return tag


async def ready(redis: Redis) -> None:
    """A cluster client learns the cluster's slots before its first command (which would
    otherwise spend part of its deadline, `OUTLIVE_QUEUE_TIMEOUT_S`, doing it)."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()
