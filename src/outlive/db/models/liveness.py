"""`liveness_locks`: which worker processes took their liveness lock on this PostgreSQL server,
in its current life (`outlive.db.liveness`).

An advisory lock lives in one server's memory: it is not replicated, and a restart, a crash or a
failover to a standby loses every one. So a free lock proves its holder gone only on a server
where that holder had taken it. Each worker records its key here when it takes its lock, with
the start time of the server it took it on; a verdict "worker gone" needs that record to name
the server's current life. The table is UNLOGGED: PostgreSQL empties it after a crash, and a
standby has none of it (it is not replicated, and it is reset when a standby is promoted), so a
record can only be of this server; the start time covers a clean restart, which keeps it.
"""

from datetime import datetime

from sqlalchemy.orm import Mapped, mapped_column

from outlive.db.models.base import Base, now_default


class LivenessLock(Base):
    __tablename__ = "liveness_locks"
    __table_args__ = {"prefixes": ["UNLOGGED"]}  # noqa: RUF012 (SQLAlchemy reads this)

    worker_id: Mapped[int] = mapped_column(primary_key=True)  # the lock's key, `runs.worker_id`
    server_started_at: Mapped[datetime]  # `pg_postmaster_start_time()` when it was taken
    taken_at: Mapped[datetime] = now_default()
