"""The schema the app serves: the root types of `outlive.resolvers`, with the socket's limits and
error codes as strawberry extensions (strawberry executes only the socket's subscriptions; HTTP
applies the same rules in `http.py`). No `ParserCache`/`ValidationCache`: the HTTP documents are
cached once, in `documents.Documents`, and a socket parses a subscription once per subscribe.
"""

from __future__ import annotations

import strawberry
from strawberry.extensions import AddValidationRules, MaxTokensLimiter

from outlive.config import Settings
from outlive.graphql.errors import ErrorCodes
from outlive.graphql.limits import RequestLimits, limit_rules
from outlive.resolvers.schema import build_schema


def served_schema(settings: Settings) -> strawberry.Schema:
    rules = limit_rules(settings)  # once: the rules are classes made per limiter instance
    max_tokens = settings.max_query_tokens
    return build_schema(
        extensions=[
            lambda: AddValidationRules(rules),
            lambda: MaxTokensLimiter(max_token_count=max_tokens),
            RequestLimits,
            ErrorCodes,
        ]
    )
