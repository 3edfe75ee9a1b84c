"""Automatic Persisted Queries (Apollo's `persistedQuery` extension, version 1).

A client sends the sha256 of a document instead of its text; an unknown hash is answered
`PersistedQueryNotFound` and the client sends the text with the hash once. Per tenant: a hash is
found only by a tenant that sent the document's text before (`Prepared.owners`); any other tenant
is told `PersistedQueryNotFound`, exactly as if nobody had sent it. There is no store of
its own: the document cache (`documents.Documents`) is keyed by the same sha256, so a document
that validated is found by its hash for as long as the cache keeps it (an evicted one is asked
for again, as the protocol expects). An invalid document is never found by its hash.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from outlive.errors import BadUserInput
from outlive.graphql.documents import Documents, Prepared


class PersistedQueryNotFound(Exception):
    """The hash is not known here (yet): the client sends the document with it."""


def request_document(
    documents: Documents,
    query: str | None,
    extensions: Mapping[str, Any] | None,
    *,
    owner: Hashable,
    persisted: bool = True,
) -> Prepared | None:
    """The request's document, from its text or from the hash it sends; None without either.

    Raises `BadUserInput` for a malformed extension or a hash that does not match the text,
    `PersistedQueryNotFound` for a hash not known here sent without the text (always, when
    `persisted` is off) or not sent by `owner` (a tenant) before."""
    extension = (extensions or {}).get("persistedQuery")
    if extension is None:
        return None if query is None else documents.prepare(query, owner)
    digest = _digest(extension)
    if query is None:
        found = documents.persisted(digest, owner) if persisted else None
        if found is None:
            raise PersistedQueryNotFound()
        return found
    prepared = documents.prepare(query, owner)
    if prepared.digest != digest:
        raise BadUserInput("provided sha does not match query")
    return prepared


def _digest(extension: object) -> str:
    if not isinstance(extension, dict) or extension.get("version") != 1:
        raise BadUserInput("persistedQuery: only version 1 is supported")
    digest = extension.get("sha256Hash")
    if not isinstance(digest, str) or len(digest) != 64:
        raise BadUserInput("persistedQuery: sha256Hash must be 64 hex digits")
    return digest.lower()
