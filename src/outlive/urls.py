"""`DATABASE_URL` as libpq and asyncpg read it, several hosts included (CONTRACT §2).

`postgresql://user:secret@h1:5432,h2:5433/outlive?target_session_attrs=read-write` names the
nodes of one PostgreSQL cluster (a primary and its standbys, under Patroni or a managed offer);
a connection goes to whichever of them is the primary (`outlive.db.primary`). SQLAlchemy's URL
parser reads the port of such a URL as `5432,h2:5433` and raises `ValueError`, so every consumer
of the URL goes through `PostgresUrl`: it splits the host list, checks each port, and writes the
form each driver needs (one URL per host for asyncpg, `?host=h1:5432&host=h2:5433` for
SQLAlchemy). Everything else of the URL (the user and password, percent-encoded; the database;
the query) is kept exactly as written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote, unquote

SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class PostgresUrl:
    scheme: str
    userinfo: str  # `user[:password]` as written (percent-encoded), "" when none
    hosts: tuple[str, ...]  # each `host`, `host:port` or `[v6]:port` as written; () for none
    path: str  # `/database` as written, or ""
    query: tuple[str, ...]  # the `name=value` parts of the query string, as written

    @classmethod
    def parse(cls, url: str) -> PostgresUrl:
        """Raises `ValueError` naming what is wrong (never the password)."""
        scheme, sep, rest = url.partition("://")
        if not sep or scheme not in SCHEMES:
            raise ValueError(f"DATABASE_URL must be postgresql://…, not {scheme or '(none)'}://")
        rest, _, query = rest.partition("?")
        netloc, slash, path = rest.partition("/")
        userinfo, at, hostlist = netloc.rpartition("@")
        hosts = tuple(_split_hosts(hostlist)) if hostlist else ()
        for host in hosts:
            _check_port(host)
        return cls(
            scheme=scheme,
            userinfo=userinfo if at else "",
            hosts=hosts,
            path=slash + path,
            query=tuple(part for part in query.split("&") if part),
        )

    @property
    def has_several_hosts(self) -> bool:
        return len(self.hosts) > 1

    def param(self, name: str) -> str | None:
        """The (last) value of a query parameter, decoded."""
        found = [v for k, v in parse_qsl("&".join(self.query)) if k == name]
        return found[-1] if found else None

    def without(self, *names: str) -> PostgresUrl:
        """The same URL without these query parameters."""
        kept = tuple(p for p in self.query if p.partition("=")[0] not in names)
        return replace(self, query=kept)

    def per_host(self) -> list[PostgresUrl]:
        """One URL per host, in the order written (a URL with one host or none: itself)."""
        if not self.has_several_hosts:
            return [self]
        return [replace(self, hosts=(host,)) for host in self.hosts]

    @property
    def database(self) -> str:
        return unquote(self.path[1:])

    def with_database(self, name: str) -> PostgresUrl:
        return replace(self, path=f"/{quote(name)}")

    def for_sqlalchemy(self, drivername: str) -> str:
        """The form SQLAlchemy parses: several hosts go to the query (`?host=h1:5432&host=…`),
        which its asyncpg dialect hands to asyncpg as lists."""
        if not self.has_several_hosts:
            return str(replace(self, scheme=drivername))
        hosts = tuple(f"host={_with_default_port(h)}" for h in self.hosts)
        return str(replace(self, scheme=drivername, hosts=(), query=hosts + self.query))

    @property
    def host_names(self) -> list[str]:
        """The hosts as `host:port`, for messages."""
        return [_with_default_port(h) for h in self.hosts] or ["(the default host)"]

    def __str__(self) -> str:
        auth = f"{self.userinfo}@" if self.userinfo else ""
        query = "?" + "&".join(self.query) if self.query else ""
        return f"{self.scheme}://{auth}{','.join(self.hosts)}{self.path}{query}"


def _split_hosts(hostlist: str) -> list[str]:
    """`h1:5432,[::1]:5433,h3` → each host as written (a comma inside brackets is no separator,
    though an IPv6 address never holds one)."""
    hosts, depth, start = [], 0, 0
    for i, char in enumerate(hostlist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            hosts.append(hostlist[start:i])
            start = i + 1
    hosts.append(hostlist[start:])
    if any(not host for host in hosts):
        raise ValueError(f"DATABASE_URL names an empty host in {hostlist!r}")
    return hosts


def _port_of(host: str) -> str | None:
    if host.startswith("["):
        after = host.partition("]")[2]
        return after[1:] if after.startswith(":") else None
    _, colon, port = host.rpartition(":")
    return port if colon else None


def _check_port(host: str) -> None:
    port = _port_of(host)
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"DATABASE_URL: the port of {host!r} is not a port number")


def _with_default_port(host: str) -> str:
    return host if _port_of(host) is not None else f"{host}:5432"
