"""A node's part in a campaign (``CRAWLFLEET_CAMPAIGN = "name"``, see
:mod:`crawlfleet.state.campaigns`):

- ``CampaignFeeder`` (an extension) claims task units from the state DB as the fleet
  needs work, queues each unit's start requests in the job's frontier (from the
  campaign's URL template, or the spider's ``unit_requests(unit)`` hook), and marks them
  fed. While the campaign is active it keeps the job open (a job between two units is not
  finished); once every unit was handed out and the frontier is empty it runs the
  re-crawl phase (failed links of the registry, then failed units, while attempts are
  left) and ends the campaign. It pauses and resumes with the campaign. Once the
  campaign has been active on this node for ``CRAWLFLEET_PROGRESS_SECONDS``, it says
  the campaign's progress that often (units done and failed, rate, ETA: the whole
  fleet's, from the state DB), and at each change of phase.
- ``UnitMeta`` (a spider middleware) gives every request a unit's pages lead to the
  unit's label (``crawlfleet_unit``), so that its failures are filed under the unit.

The first request of a unit carries the unit's id (``crawlfleet_unit_id``): the error
registry's middleware reports it done when it is crawled, failed when it fails for good.
All state-DB calls run in a thread; the node's reactor never waits for them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import NotConfigured
from scrapy.http import Response

from crawlfleet.campaigns.space import Unit
from crawlfleet.exceptions import ConfigError
from crawlfleet.meta import UNIT_ID_META, UNIT_META
from crawlfleet.node.progress import campaign_line, progress_seconds
from crawlfleet.node.recrawl import SETTLE_SECONDS, HeldLoop, Settled, open_db
from crawlfleet.outage import Outage
from crawlfleet.state.url import check_state_db_url, state_db_url

__all__ = ["UNIT_ID_META", "UNIT_META", "CampaignFeeder", "UnitMeta"]

logger = logging.getLogger(__name__)

#: Seconds between two looks at the campaign (and at most, after rounds that failed).
ROUND_SECONDS = 1.0
MAX_ROUND_SECONDS = 30.0
#: Units claimed at most per round.
UNITS_PER_ROUND = 5
#: While the state DB does not answer (or rounds fail), the node says so this often.
OUTAGE_LOG_SECONDS = 60.0
HOLD = "campaign"


class CampaignFeeder(HeldLoop):
    """See the module docstring."""

    HOLD = HOLD

    def __init__(
        self, crawler: Crawler, name: str, db_url: str, progress_seconds: float = 0.0
    ) -> None:
        super().__init__(crawler, db_url, progress_seconds)
        self.name = name
        self.fed = 0
        #: a unit leased and not fed within this long goes to another node
        self.lease_seconds = crawler.settings.getfloat("CRAWLFLEET_LEASE_SECONDS")
        #: the state DB not answering, as this node's rounds see it (said by class only:
        #: a database error's text can be long, and carry the query)
        self._db_outage = Outage(
            f"The state DB of campaign {name!r}",
            lambda: "its units wait",
            OUTAGE_LOG_SECONDS,
            describe=lambda exc: type(exc).__name__,
        )
        self._last_state = ""
        self._settled = Settled()
        #: the settling epoch in which no failed link was left to re-crawl
        self._concluded = -1
        #: the campaign changed phase (paused, re-crawl round, finished, ...)
        self._changed = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CampaignFeeder:
        settings = crawler.settings
        name = str(settings.get("CRAWLFLEET_CAMPAIGN") or "").strip()
        if not name:
            raise NotConfigured  # CRAWLFLEET_CAMPAIGN is not set (no message: Scrapy warns of one)
        if not settings.getbool("CRAWLFLEET_ERRORS"):
            raise ConfigError(
                "CRAWLFLEET_CAMPAIGN needs CRAWLFLEET_ERRORS: units report through the "
                "error registry"
            )
        return cls(
            crawler, name, check_state_db_url(state_db_url(settings)), progress_seconds(settings)
        )

    async def spider_closed(self, spider: Spider) -> None:
        await super().spider_closed(spider)
        if self.fed:
            logger.info("Campaign %r: this node fed %d unit(s)", self.name, self.fed)

    # -- the loop -----------------------------------------------------------------------
    async def _run(self, scheduler: Any) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        loop = asyncio.get_running_loop()
        failed, said_failed = 0, -OUTAGE_LOG_SECONDS
        while True:
            try:
                if self.db is None:
                    self.db = await asyncio.to_thread(open_db, self.db_url)
                await self._round(scheduler)
                await self._progress(scheduler)
                failed = 0
                self._db_outage.succeeded(lambda: "its units are fed again")
            except ConfigError as exc:  # the campaign is unknown: nothing to feed, ever
                logger.error("Campaign: %s", exc)
                scheduler.lifecycle.holds.discard(HOLD)
                scheduler.lifecycle.close_once("campaign unknown")
                return
            except SQLAlchemyError as exc:
                self._db_outage.failed(exc)
            except Exception:
                # a bug (a unit hook that raises, say): said once a minute, and the
                # rounds slow down, up to one every MAX_ROUND_SECONDS
                failed += 1
                now = loop.time()
                if now - said_failed >= OUTAGE_LOG_SECONDS:
                    said_failed = now
                    logger.exception("Campaign %r: a round failed; trying again", self.name)
            await asyncio.sleep(min(ROUND_SECONDS * 2 ** min(failed, 6), MAX_ROUND_SECONDS))

    async def _progress(self, scheduler: Any) -> None:
        """Say the campaign's progress when it is due (see the module docstring). It
        never stops the loop: the state DB or Redis failing is said by the rounds."""
        from crawlfleet.state.campaigns import ACTIVE, campaign_status

        changed, self._changed = self._changed, False
        if not self.cadence.due(change=changed):
            if self._last_state not in ACTIVE:
                self.cadence.stop()
            return
        try:
            status = await asyncio.to_thread(
                campaign_status, self.db, self.name, failed_units=False
            )
            counters = await scheduler.frontier.counters()
        except Exception:
            logger.debug("Campaign %r: no progress line this time", self.name, exc_info=True)
            return
        left = max(0, counters.get("queued", 0)) + max(0, counters.get("leased", 0))
        line = campaign_line(status, left)
        line.log(logger)
        self.phase = str(line)
        if status["state"] not in ACTIVE:
            self.cadence.stop()

    async def _round(self, scheduler: Any) -> None:
        from crawlfleet.state.campaigns import ACTIVE, claim_units

        holds = scheduler.lifecycle.holds
        info, units = await asyncio.to_thread(
            claim_units,
            self.db,
            self.name,
            scheduler.node_id,
            most=UNITS_PER_ROUND,
            lease_seconds=self.lease_seconds,
        )
        state = info["state"]
        self._note_state(state)
        if info["job"] != scheduler.config.job:
            raise ConfigError(
                f"campaign {self.name!r} crawls job {info['job']!r}, this node job "
                f"{scheduler.config.job!r}"
            )
        if state not in ACTIVE:
            holds.discard(HOLD)  # the job finishes once its frontier is empty
            return
        holds.add(HOLD)
        if units:
            await self._feed(scheduler, units, info["template"])
            self._settled.reset()
            return
        if state not in ("running", "stopping"):
            self._settled.reset()  # paused: the frontier settles anew afterwards
            return
        if await self._settled.check(scheduler.frontier):
            await self._wrap_up(scheduler, state, info)

    async def _feed(self, scheduler: Any, units: list[Any], template: str) -> None:
        from crawlfleet.state.campaigns import finish_unit, mark_fed

        requests: list[Request] = []
        empty = []
        for uid, unit, again in units:
            made = self._requests(uid, unit, template, again)
            if not made:
                empty.append(uid)  # nothing to crawl: done
            requests += made
        if requests:
            await scheduler.sync.feed(requests)
        ids = [uid for uid, _unit, _again in units]
        fed = await asyncio.to_thread(mark_fed, self.db, scheduler.node_id, ids)
        for uid in empty:
            await asyncio.to_thread(finish_unit, self.db, uid, ok=True)
        self.fed += fed
        scheduler.stats.inc("crawlfleet/campaign/units_fed", fed)

    async def _wrap_up(self, scheduler: Any, state: str, info: dict[str, Any]) -> None:
        """The frontier has settled: units still ``fed`` are done; once every unit was
        handed out, re-crawl rounds, then the end (a conclusion that nothing is left is
        drawn only after a whole settling window more: another node's round may be on
        its way into the frontier)."""
        from crawlfleet.fleet.errors import recrawl_errors
        from crawlfleet.state.campaigns import settle_fed, wrap_up

        await asyncio.to_thread(settle_fed, self.db, self.name, older_than=SETTLE_SECONDS)
        if state == "running" and not info["exhausted"]:
            return  # units are still to be handed out (or fed again): claims go on
        settled = self._settled
        if self._concluded != settled.epoch:
            if state == "running":
                links = await recrawl_errors(
                    scheduler.frontier, self.db, max_recrawls=info["max_attempts"] - 1
                )
                if links.queued:
                    logger.info(
                        "Campaign %r: re-crawl round: %d failed link(s) queued again",
                        self.name,
                        links.queued,
                    )
                    self._changed = True
                    scheduler.sync.leaser.work_arrived()
                    settled.reset()
                    return
            self._concluded = settled.epoch
            settled.restart()
            return
        outcome = await asyncio.to_thread(wrap_up, self.db, self.name)
        settled.reset()
        if outcome == "recrawl":
            logger.info("Campaign %r: re-crawl round: failed units are fed again", self.name)
            self._changed = True
        self._note_state(outcome)

    def _note_state(self, state: str) -> None:
        from crawlfleet.state.campaigns import ACTIVE

        if state != self._last_state and state in ("paused", "stopping", "stopped", "finished"):
            logger.info("Campaign %r is %s", self.name, state)
            self._changed = True
        elif state == "running" and self._last_state == "paused":
            logger.info("Campaign %r is running again", self.name)
            self._changed = True
        if state in ACTIVE and not self.cadence.running:
            self.cadence.start()
        if state in ("running", "paused", "stopping", "stopped", "finished"):
            if state != self._last_state and (state in ACTIVE or self.cadence.running):
                self.phase = f"campaign {self.name} ({state})"
            self._last_state = state

    def _requests(self, uid: int, unit: Unit, template: str, again: bool) -> list[Request]:
        spider = self.crawler.spider
        hook = getattr(spider, "unit_requests", None)
        if callable(hook):
            requests = list(hook(unit))
        elif template:
            requests = [Request(unit.url(template))]
        else:
            raise ConfigError(
                f"campaign {self.name!r} has no URL template and the spider no unit_requests()"
            )
        label = f"{self.name}:{unit.label}"[:200]
        out = []
        for request in requests:
            if again:  # a re-crawl: its pages were seen the first time
                request = request.replace(dont_filter=True)
            request.meta.setdefault(UNIT_META, label)
            out.append(request)
        if out:
            out[0].meta[UNIT_ID_META] = uid
        return out


class UnitMeta:
    """A spider middleware: requests from a unit's pages belong to the unit."""

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> UnitMeta:
        if not str(crawler.settings.get("CRAWLFLEET_CAMPAIGN") or "").strip():
            raise NotConfigured  # CRAWLFLEET_CAMPAIGN is not set (no message: Scrapy warns of one)
        return cls()

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        unit = response.meta.get(UNIT_META) if response.request is not None else None
        async for obj in result:
            if unit is not None and isinstance(obj, Request):
                obj.meta.setdefault(UNIT_META, unit)
            yield obj

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterable[Any]:
        unit = response.meta.get(UNIT_META) if response.request is not None else None
        for obj in result:
            if unit is not None and isinstance(obj, Request):
                obj.meta.setdefault(UNIT_META, unit)
            yield obj
