"""Encryption at rest per tenant (issue 46), off by default.

Envelope keys: a tenant that encrypts (`outlive tenant encrypt SLUG`) has a random 256-bit data
key, stored in `tenants.data_key` wrapped (AES-256-GCM) by the deployment key
`OUTLIVE_ENCRYPTION_KEY` (32 bytes, base64), which is never stored. Its payloads are sealed
(AES-256-GCM, a random 96-bit nonce each) before they are written: the row holds
`{"$enc": "<base64 nonce + ciphertext>"}`, and a sealed value over the blob threshold is stored
as a blob of that sealed text (so the blob's bytes are ciphertext too). Rotation
(`outlive tenant rewrap --old-key OLD`): the new deployment key re-wraps every data key, one
statement per tenant; no payload is re-encrypted (the data keys do not change).

What is sealed: step results (the journal, inline and as blobs: `seal`, `open_text`), and the runs'
inputs and outputs and the signals' payloads (`seal_value`, `open_value`: the jsonb column holds
`{"$enc": ...}`; in `runs.input` and `runs.output`, in `run_signals.payload`, `run_waits.payload`
and the `signal` event's `payload`), and the schedules' inputs (`schedules.input`: createSchedule,
updateSchedule, `ctx.schedules.create`). Every start seals its input (startRun with every strategy,
debounce, retryRun, replays, child runs, schedules); a settle its output (a large one is a blob of
the sealed value); signalRun its payload. Who reads them opens them: the attempt (its input, its
signals, its children's outputs) with the cipher its journal loaded, so a tenant that does not
encrypt costs it no query; GraphQL (`Ciphers`: looked up only when a sealed value is read; a write
looks its tenant's key up once, only with a deployment key); and `outlive replay`. A repeated
idempotency key compares the opened input (each seal has its own nonce). Not sealed: names, keys,
tags and timelines (identifiers), what a wait shows (`waitingShow`), and stream chunks (Redis,
minutes; docs/governance.md "Encryption at rest" says why).
"""

from __future__ import annotations

import base64
import functools
import json
import os
from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.db.tx import Db
from outlive.errors import BadUserInput
from outlive.services import blobs

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from outlive.config import Settings

KEY = "$enc"
_PREFIX = '{"' + KEY + '": "'  # how PostgreSQL renders a sealed jsonb value as text
_WRAP_AAD = b"outlive data key"
_keys: dict[tuple[UUID, bytes], AESGCM] = {}  # (tenant, wrapped key) -> its cipher

_DATA_KEY = prepare(text("SELECT data_key FROM tenants WHERE id = :tenant_id"))
_SET_KEY = prepare(
    text(
        "UPDATE tenants SET data_key = coalesce(data_key, :wrapped) WHERE slug = :slug RETURNING id"
    )
)
_ALL_KEYS = prepare(text("SELECT id, data_key FROM tenants WHERE data_key IS NOT NULL"))
_REWRAP = prepare(
    text("UPDATE tenants SET data_key = :new WHERE id = :tenant_id AND data_key = :old")
)


def kek_of(settings: Settings) -> AESGCM | None:
    """The deployment key (OUTLIVE_ENCRYPTION_KEY), or None: nothing is sealed."""
    secret = settings.encryption_key
    return None if secret is None else deployment_key(secret.get_secret_value())


@functools.lru_cache(maxsize=4)
def deployment_key(encoded: str) -> AESGCM:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # lazily: cold start

    try:
        key = base64.b64decode(encoded, validate=True)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise BadUserInput("OUTLIVE_ENCRYPTION_KEY is 32 bytes in base64")
    return AESGCM(key)


def new_deployment_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def wrap(kek: AESGCM, data_key: bytes) -> bytes:
    nonce = os.urandom(12)
    return nonce + kek.encrypt(nonce, data_key, _WRAP_AAD)


def unwrap(kek: AESGCM, wrapped: bytes) -> bytes:
    return kek.decrypt(wrapped[:12], wrapped[12:], _WRAP_AAD)


async def enable(db: Db, kek: AESGCM, slug: str) -> bool:
    """The tenant encrypts from now on (its data key made, unless it has one): False when no
    such tenant. Values written before stay as they are."""
    row = await db.one(_SET_KEY, slug=slug, wrapped=wrap(kek, os.urandom(32)))
    return row is not None


async def rewrap(db: Db, old: AESGCM, new: AESGCM) -> tuple[int, int]:
    """Every tenant's data key that `old` wraps, re-wrapped by `new` (rotation), one statement
    each: (how many were, how many `old` does not open: already re-wrapped by an earlier run of
    the same rotation, or wrapped by another key; left as they are)."""
    from cryptography.exceptions import InvalidTag  # lazily: cold start

    done = skipped = 0
    for row in await db.all(_ALL_KEYS):
        wrapped = bytes(row["data_key"])
        try:
            data_key = unwrap(old, wrapped)
        except InvalidTag:
            skipped += 1
            continue
        done += await db.execute(_REWRAP, tenant_id=row["id"], old=wrapped, new=wrap(new, data_key))
    return done, skipped


async def cipher_of(db: Db, kek: AESGCM | None, tenant_id: UUID) -> AESGCM | None:
    """The tenant's data cipher, or None when it does not encrypt (or no deployment key)."""
    if kek is None:
        return None
    row = await db.one(_DATA_KEY, tenant_id=tenant_id)
    if row is None or row["data_key"] is None:
        return None
    wrapped = bytes(row["data_key"])
    found = _keys.get((tenant_id, wrapped))
    if found is None:
        found = _keys[tenant_id, wrapped] = type(kek)(unwrap(kek, wrapped))
    return found


def seal(cipher: AESGCM, value_json: str) -> str:
    return json.dumps(_sealed(cipher, value_json))


def _sealed(cipher: AESGCM, value_json: str) -> dict[str, str]:
    nonce = os.urandom(12)
    sealed = nonce + cipher.encrypt(nonce, value_json.encode(), None)
    return {KEY: base64.b64encode(sealed).decode()}


def seal_value(cipher: AESGCM | None, value: Any) -> Any:
    """What a jsonb column holds for `value` (a run's input or output, a signal's payload):
    `{"$enc": ...}` for a tenant that encrypts, else the value itself. None stays None (no
    output, no payload: nothing to hide, and `IS NULL` keeps its meaning)."""
    if cipher is None or value is None:
        return value
    try:
        value_json = json.dumps(value, allow_nan=False)
    except ValueError:
        raise BadUserInput("a number in the JSON is out of range (not finite)") from None
    return _sealed(cipher, value_json)


def is_sealed_value(value: Any) -> bool:
    """A decoded jsonb value is a sealed one (cheap: no cipher needed to tell)."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(KEY), str)


def open_value(cipher: AESGCM | None, value: Any) -> Any:
    """The value a decoded jsonb value stands for (a sealed one opened; anything else is
    itself, and so is a sealed one when there is no cipher to open it with)."""
    if cipher is None or not is_sealed_value(value):
        return value
    sealed = base64.b64decode(value[KEY])
    return json.loads(cipher.decrypt(sealed[:12], sealed[12:], None))


class Sealer:
    """One tenant's values, sealed and opened by its data cipher once it is known (None: the
    tenant does not encrypt). An attempt learns it when it loads its journal
    (`workflows.steps`); its child runs, its settle and its waits use the same one, so a
    tenant that does not encrypt costs them no query."""

    def __init__(self, cipher: AESGCM | None = None) -> None:
        self.cipher = cipher

    def seal(self, value: Any) -> Any:
        return seal_value(self.cipher, value)

    def open(self, value: Any) -> Any:
        return open_value(self.cipher, value)


def is_sealed(recorded: str) -> bool:
    return recorded.startswith(_PREFIX) or recorded.startswith('{"' + KEY + '":"')


def open_text(cipher: AESGCM | None, recorded: str) -> str:
    """The JSON text a sealed value stands for (anything else is itself)."""
    if cipher is None or not is_sealed(recorded):
        return recorded
    sealed = base64.b64decode(json.loads(recorded)[KEY])
    return cipher.decrypt(sealed[:12], sealed[12:], None).decode()


class Ciphers:
    """The data ciphers of the tenants one request reads, each looked up once and only when a
    sealed value needs it: reading the values of a tenant that does not encrypt costs no query,
    with or without a deployment key."""

    def __init__(self, db: Db, kek: AESGCM | None) -> None:
        self._db = db
        self._kek = kek
        self._found: dict[UUID, AESGCM | None] = {}

    async def of(self, tenant_id: UUID) -> AESGCM | None:
        if tenant_id not in self._found:
            self._found[tenant_id] = await cipher_of(self._db, self._kek, tenant_id)
        return self._found[tenant_id]

    async def open(self, tenant_id: UUID, value: Any) -> Any:
        if not is_sealed_value(value):
            return value
        return open_value(await self.of(tenant_id), value)


async def read_range(
    db: Db, kek: AESGCM | None, tenant_id: UUID, run_id: UUID, ref: str, offset: int, length: int
) -> tuple[int, bytes]:
    """`blobs.read_range`, of the value a blob stands for: a blob of a sealed value (a tenant
    that encrypts) is read whole, opened, and the range taken of the value's JSON text (the
    size too is the value's, not the stored blob's, which the reference's `size` gives)."""
    size, part = await blobs.read_range(db, tenant_id, run_id, ref, offset, length)
    if kek is None:
        return size, part
    head = part if offset == 0 else (await blobs.read_range(db, tenant_id, run_id, ref, 0, 16))[1]
    if not is_sealed(head[:16].decode(errors="replace")):
        return size, part
    cipher = await cipher_of(db, kek, tenant_id)
    if cipher is None:
        return size, part
    value = open_value(cipher, await blobs.resolve_held(db, run_id, {blobs.KEY: ref, "size": size}))
    whole = blobs.encoded(value)
    return len(whole), whole[offset : offset + length]
