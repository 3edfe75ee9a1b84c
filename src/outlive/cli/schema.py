"""`outlive schema`: the GraphQL SDL."""

from __future__ import annotations

import argparse


def cmd_schema(_: argparse.Namespace) -> None:
    from outlive.resolvers.schema import build_schema

    print(build_schema().as_str())  # noqa: T201
