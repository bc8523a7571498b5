"""What every request of the manager works with: the fleet's Redis, the state DB and the
settings nodes share (key prefix, seen-filter, site keys, configured rate limits)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from redis.asyncio import Redis
from scrapy.settings import BaseSettings

from crawlfleet.fleet.jobs import require_job
from crawlfleet.fleet.snapshot import configured_limits
from crawlfleet.frontier.config import FrontierConfig, validate_job_name
from crawlfleet.frontier.limits import RateLimits
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.manager.callers import RecentCallers
from crawlfleet.manager.shared import Shared
from crawlfleet.manager.signin import SignInGuard
from crawlfleet.pipelines.browse import SqlItemReader
from crawlfleet.redis.config import RedisConfig
from crawlfleet.redis.keys import JobKeys
from crawlfleet.settings.access import get_float, get_int, get_path, get_str
from crawlfleet.state.db import StateDB
from crawlfleet.state.events import record_event

__all__ = ["ManagerContext"]

#: Points of throughput history kept for the dashboard's charts (one per watch: an
#: hour at the default 5 s).
HISTORY_POINTS = 720

P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class ManagerContext:
    redis: Redis
    #: the URL of *redis* (given to nodes started through Scrapyd when it has no password)
    redis_url: str
    db: StateDB
    key_prefix: str
    frontier_config: FrontierConfig  #: its seen-filter and site keys (job: a placeholder)
    limits: RateLimits
    #: seconds between two looks at every job (CRAWLFLEET_MANAGER_WATCH_SECONDS)
    watch_seconds: float
    #: how long a dashboard sign-in lasts (CRAWLFLEET_MANAGER_SESSION_HOURS)
    session_hours: float
    #: the SQL item store it reads items from (CRAWLFLEET_SQL_URL, CRAWLFLEET_SQL_TABLE)
    items: SqlItemReader
    #: most items one export holds (CRAWLFLEET_MANAGER_EXPORT_MAX_ITEMS)
    export_max_items: int
    #: Scrapyd name -> monotonic time since which it has not answered the watch
    unreachable_since: dict[str, float] = field(default_factory=dict)
    #: job -> (requests done, monotonic time that figure was first seen): stall times
    progress: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: webhook deliveries under way (cancelled when the manager stops)
    deliveries: set[asyncio.Task[None]] = field(default_factory=set)
    #: the fleet's, a job's and the nodes' figures, made once for every request and
    #: live stream (crawlfleet.manager.shared)
    figures: Shared = field(default_factory=Shared)
    #: callers (tokens, sessions) looked up in the last seconds (crawlfleet.manager.auth)
    callers: RecentCallers = field(default_factory=RecentCallers)
    #: failed sign-ins by client, slowed (crawlfleet.manager.signin)
    sign_ins: SignInGuard = field(default_factory=SignInGuard)
    #: one point a watch, oldest first: {"at": Redis time (ms), "jobs": {job: pages/s}}
    history: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))

    @classmethod
    def build(
        cls, settings: BaseSettings, redis: Redis, redis_url: str, db: StateDB
    ) -> ManagerContext:
        """ConfigError naming any setting that is wrong."""
        return cls(
            redis=redis,
            redis_url=redis_url,
            db=db,
            key_prefix=RedisConfig.from_settings(settings).key_prefix,
            frontier_config=FrontierConfig.from_settings(settings, "manager"),
            limits=configured_limits(settings),
            watch_seconds=get_float(settings, "CRAWLFLEET_MANAGER_WATCH_SECONDS", minimum=0.1),
            session_hours=get_float(settings, "CRAWLFLEET_MANAGER_SESSION_HOURS", minimum=0.01),
            items=SqlItemReader(
                get_str(settings, "CRAWLFLEET_SQL_URL"),
                table=get_str(settings, "CRAWLFLEET_SQL_TABLE"),
                data_dir=get_path(settings, "CRAWLFLEET_DATA_DIR"),
            ),
            export_max_items=get_int(settings, "CRAWLFLEET_MANAGER_EXPORT_MAX_ITEMS", minimum=1),
        )

    def changed(self) -> None:
        """Something may have changed through this manager: figures and callers are
        looked up again at the next ask (the change, a sign-out, shows at once)."""
        self.figures.forget()
        self.callers.forget()

    def keys(self, job: str) -> JobKeys:
        return JobKeys.of(self.key_prefix, validate_job_name(job))

    def frontier(self, job: str) -> JobFrontier:
        c = self.frontier_config
        return JobFrontier(
            self.redis,
            self.keys(job),
            c.seen,
            shards=c.shards,
        )

    async def known_frontier(self, job: str) -> JobFrontier:
        """The frontier of *job*; UnknownJob if this Redis has never seen it."""
        frontier = self.frontier(job)
        await require_job(self.redis, self.key_prefix, job)
        return frontier

    async def in_db(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a blocking state-DB call in a worker thread (never on the event loop)."""
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def record(
        self, actor: str, action: str, job: str | None, detail: dict[str, Any]
    ) -> None:
        """Keep a change made through the manager in the audit (:func:`record_event`:
        *detail* must hold no secret), off the event loop."""
        await self.in_db(record_event, self.db, actor, action, job, detail)

    async def remove(
        self, actor: str, action: str, delete: Callable[[StateDB, str], object], name: str
    ) -> dict[str, str]:
        """Delete what is called *name* from the state DB (``delete(db, name)``), keep
        that in the audit as *action*, and answer ``{"removed": name}``."""
        await self.in_db(delete, self.db, name)
        await self.record(actor, action, None, {"name": name})
        return {"removed": name}
