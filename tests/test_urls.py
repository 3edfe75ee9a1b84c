"""`DATABASE_URL` with several hosts, as libpq and asyncpg write it (CONTRACT §2, round five)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from outlive.config import Settings
from outlive.db.engine import sqlalchemy_url
from outlive.urls import PostgresUrl

MULTI = "postgresql://app:s%40cret@h1:5441,h2:5442/outlive?target_session_attrs=read-write"


def test_a_multi_host_url_is_split_into_one_url_per_host_with_the_rest_as_written() -> None:
    url = PostgresUrl.parse(MULTI)
    assert url.hosts == ("h1:5441", "h2:5442")
    assert str(url) == MULTI  # nothing re-encoded: the password's %40 stays as it was
    assert [str(u) for u in url.per_host()] == [
        "postgresql://app:s%40cret@h1:5441/outlive?target_session_attrs=read-write",
        "postgresql://app:s%40cret@h2:5442/outlive?target_session_attrs=read-write",
    ]
    assert url.param("target_session_attrs") == "read-write"
    assert (
        str(url.without("target_session_attrs"))
        == "postgresql://app:s%40cret@h1:5441,h2:5442/outlive"
    )


def test_sqlalchemy_gets_the_hosts_in_its_query_form() -> None:
    """What made `outlive migrate` die: SQLAlchemy reads `5441,h2:5442` as one port."""
    with pytest.raises(ValueError, match="invalid literal"):
        make_url(MULTI)
    parsed = make_url(sqlalchemy_url(MULTI))
    assert parsed.drivername == "postgresql+asyncpg"
    assert parsed.query["host"] == ("h1:5441", "h2:5442")
    assert parsed.query["target_session_attrs"] == "read-write"
    assert (parsed.username, parsed.password, parsed.database) == ("app", "s@cret", "outlive")


def test_one_host_urls_keep_their_usual_forms() -> None:
    for url in (
        "postgresql://postgres@127.0.0.1:5432/test",
        "postgres://u:p@db/x",
        "postgresql://postgres:@/postgres?host=/tmp/sockets",  # pgserver's, a socket directory
        "postgresql://[::1]:5433/db",
    ):
        parsed = PostgresUrl.parse(url)
        assert str(parsed) == url
        assert parsed.per_host() == [parsed]
    assert make_url(sqlalchemy_url("postgresql://u@db:6000/x")).port == 6000


def test_ipv6_hosts_and_default_ports() -> None:
    url = PostgresUrl.parse("postgresql://u@[::1]:5441,[fe80::1],h3/db")
    assert url.hosts == ("[::1]:5441", "[fe80::1]", "h3")
    assert url.host_names == ["[::1]:5441", "[fe80::1]:5432", "h3:5432"]


def test_another_database_on_the_same_hosts() -> None:
    url = PostgresUrl.parse(MULTI).with_database("outlive_test_1")
    assert str(url).startswith("postgresql://app:s%40cret@h1:5441,h2:5442/outlive_test_1?")
    assert url.database == "outlive_test_1"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("mysql://x", "must be postgresql://"),
        ("postgresql://u@h1:5441,h2:nope/db", "'h2:nope' is not a port number"),
        ("postgresql://u@h1:5441,,h2/db", "empty host"),
        ("postgresql://u@h1:70000/db", "is not a port number"),
    ],
)
def test_a_malformed_url_is_refused_by_the_settings_saying_why(url: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        Settings(database_url=url)


def test_the_settings_take_a_multi_host_url() -> None:
    assert Settings(database_url=MULTI).database_url == MULTI
    assert Settings(db_liveness_url=MULTI).db_liveness_url == MULTI
