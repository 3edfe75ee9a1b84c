"""Encryption at rest per tenant (issue 46), off by default.

Envelope keys: a tenant that encrypts (`outlive tenant encrypt SLUG`) has a random 256-bit data
key, stored in `tenants.data_key` wrapped (AES-256-GCM) by the deployment key
`OUTLIVE_ENCRYPTION_KEY` (32 bytes, base64), which is never stored. Its step results are sealed
(AES-256-GCM, a random 96-bit nonce each) before they are written: the journal row holds
`{"$enc": "<base64 nonce + ciphertext>"}`, and a sealed result over the blob threshold is stored
as a blob of that sealed text (so the blob's bytes are ciphertext too). Rotation
(`outlive tenant rewrap --old-key OLD`): the new deployment key re-wraps every data key, one
statement per tenant; no payload is re-encrypted (the data keys do not change).

What is sealed in this round: step results (the journal, inline and as blobs). Run inputs and
outputs and signal payloads are not yet (docs/governance.md "Encryption at rest").
"""

from __future__ import annotations

import base64
import functools
import json
import os
from typing import TYPE_CHECKING
from uuid import UUID

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.db.tx import Db
from outlive.errors import BadUserInput

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
    nonce = os.urandom(12)
    sealed = nonce + cipher.encrypt(nonce, value_json.encode(), None)
    return json.dumps({KEY: base64.b64encode(sealed).decode()})


def is_sealed(recorded: str) -> bool:
    return recorded.startswith(_PREFIX) or recorded.startswith('{"' + KEY + '":"')


def open_text(cipher: AESGCM | None, recorded: str) -> str:
    """The JSON text a sealed value stands for (anything else is itself)."""
    if cipher is None or not is_sealed(recorded):
        return recorded
    sealed = base64.b64decode(json.loads(recorded)[KEY])
    return cipher.decrypt(sealed[:12], sealed[12:], None).decode()
