"""The crawlfleet Scrapy add-on: ``ADDONS = {"crawlfleet.Addon": 100}``.

It installs crawlfleet's defaults and components at the ``addon`` priority, so that the
project's own settings, a spider's ``custom_settings`` and ``-s`` options still win:

- the scheduler (the shared Redis frontier), the node telemetry published with every
  heartbeat, the feedback controller of the node's concurrency, the stats-file
  extension, the site-throttle middleware (cluster-wide back-off, robots.txt
  Crawl-delay) and the send-time middleware (a rate-limited request goes out at its
  slot or goes back);
- the project's politeness settings taken for the fleet (crawlfleet.frontier.politeness):
  ``DOWNLOAD_DELAY`` becomes every site's fleet-wide budget, and ``AUTOTHROTTLE_ENABLED``
  gives way to the shared back-off (Scrapy's AutoThrottle is disabled);
- the item stages named in ``CRAWLFLEET_ITEM_STAGES`` (text extraction, encoding
  repair, cleaning, validation, keys), in that fixed order, plus the charset-repairing
  downloader middleware when "encoding" is one of them;
- a store pipeline for each name in ``CRAWLFLEET_STORES`` ("sql", "mongodb", "redis");
- unless ``CRAWLFLEET_REVISIT`` is "off", the middlewares of continuous crawls:
  conditional requests and outcomes of visits (crawlfleet.middlewares.revisit), change
  detection on what spiders extract (crawlfleet.middlewares.changes), marks of the
  stored items of pages found gone (crawlfleet.pipelines.gone);
- safer Scrapy defaults for a fleet: no telnet console and no remote-control HTTP server
  (each a remote Python shell on every node) unless ``TELNETCONSOLE_ENABLED`` or
  ``REMOTE_CONTROL_ENABLED`` is set (while off, neither is loaded, nor Scrapy's cookies
  middleware while ``COOKIES_ENABLED`` is off: their imports are a tenth of a node's
  start), and a 64 MiB limit on a response's
  size, decompressed included (``DOWNLOAD_MAXSIZE``; a gzip bomb is dropped, not
  inflated to gigabytes), with a warning from 16 MiB (``DOWNLOAD_WARNSIZE``).

A scrapy-redis project's ``SCHEDULER`` and ``DUPEFILTER_CLASS`` are replaced, whatever
their priority, and every scrapy-redis setting found is listed in one WARNING with
what crawlfleet does with it (:mod:`crawlfleet.settings.scrapy_redis`).

Component dicts (``ITEM_PIPELINES``, ``EXTENSIONS``, ...) are merged: an entry the project
already has, including ``None`` to disable one of ours, is kept.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from types import FrameType

from scrapy.settings import BaseSettings

from crawlfleet.exceptions import ConfigError
from crawlfleet.settings.access import component_path

__all__ = ["ITEM_STAGES", "STORES", "Addon", "check", "check_given", "fail_command"]

logger = logging.getLogger(__name__)

SCHEDULER = "crawlfleet.node.scheduler.Scheduler"
STATS_FILE = "crawlfleet.node.statsfile.StatsFile"
TELEMETRY = "crawlfleet.node.telemetry.Telemetry"
FEEDBACK = "crawlfleet.node.feedback.Feedback"
CAMPAIGN_FEEDER = "crawlfleet.node.campaign.CampaignFeeder"
RECRAWL_PHASE = "crawlfleet.node.recrawl.RecrawlPhase"
UNIT_META_MW = "crawlfleet.node.campaign.UnitMeta"
SITE_THROTTLE = "crawlfleet.middlewares.throttle.SiteThrottle"
SEND_TIME = "crawlfleet.middlewares.sendtime.SendTime"
SEND_TIME_HANDLER = "crawlfleet.middlewares.sendtime.SendTimeHandler"
#: the schemes whose download handler the add-on replaces with SEND_TIME_HANDLER
WIRE_SCHEMES = ("http", "https")
GIVE_WAY = "crawlfleet.middlewares.sendtime.GiveWay"
KNOWN_DUPLICATES = "crawlfleet.middlewares.duplicates.KnownDuplicates"
FAILURES = "crawlfleet.middlewares.failures.FailureRegistry"
BROWSER_HEADERS = "crawlfleet.middlewares.useragent.BrowserHeaders"
BAN_DETECTOR = "crawlfleet.middlewares.bans.BanDetector"
RETRY = "crawlfleet.middlewares.retry.FrontierRetry"
PROXIES = "crawlfleet.middlewares.proxies.ProxyRotation"
SESSIONS = "crawlfleet.middlewares.sessions.Sessions"
SCRAPY_RETRY = "scrapy.downloadermiddlewares.retry.RetryMiddleware"
CHARSET_MIDDLEWARE = "crawlfleet.pipelines.encoding.CharsetMiddleware"
REVISITS = "crawlfleet.middlewares.revisit.Revisits"
CHANGES = "crawlfleet.middlewares.changes.Changes"
GONE_MARKS = "crawlfleet.pipelines.gone.GoneMarks"
#: Scrapy settings the add-on sets differently (at its priority: a project still wins).
SCRAPY_DEFAULTS = {
    "TELNETCONSOLE_ENABLED": False,
    # Scrapy >= 2.19: an HTTP server on every node that runs the Python code it is sent
    "REMOTE_CONTROL_ENABLED": False,
    # a crawler that keeps a site's cookies is one visitor the site can follow and ban;
    # a project that needs them sets COOKIES_ENABLED = True
    "COOKIES_ENABLED": False,
    "DOWNLOAD_MAXSIZE": 64 * 2**20,
    "DOWNLOAD_WARNSIZE": 16 * 2**20,
}
#: Scrapy components that do nothing while their setting is off, yet whose modules a node
#: would import at every start before they raise NotConfigured: setting -> (component
#: setting, component). With the setting off (the add-on's default above) they are left
#: out of the node; a project that names the component itself keeps its own entry.
UNLOADED_WHEN_OFF = {
    # aiohttp, about 85 ms of a node's start
    "REMOTE_CONTROL_ENABLED": ("EXTENSIONS", "scrapy.extensions.remote_control.RemoteControl"),
    # tldextract and requests, about 80 ms
    "COOKIES_ENABLED": (
        "DOWNLOADER_MIDDLEWARES",
        "scrapy.downloadermiddlewares.cookies.CookiesMiddleware",
    ),
    "TELNETCONSOLE_ENABLED": ("EXTENSIONS", "scrapy.extensions.telnet.TelnetConsole"),
}

#: stage name -> (pipeline, order). Extraction first: the fields it fills are repaired
#: and cleaned like the others; encoding before clean: clean would delete the control
#: characters that mis-decoded UTF-8 leaves, and with them the chance to repair it.
ITEM_STAGES: dict[str, tuple[str, int]] = {
    "text": ("crawlfleet.pipelines.text.TextExtractionPipeline", 300),
    "encoding": ("crawlfleet.pipelines.encoding.EncodingPipeline", 400),
    "clean": ("crawlfleet.pipelines.clean.CleanPipeline", 500),
    "validate": ("crawlfleet.pipelines.validate.ValidatePipeline", 600),
    "key": ("crawlfleet.pipelines.key.KeyPipeline", 700),
}
#: store name -> (pipeline, order); stores come after every stage.
STORES: dict[str, tuple[str, int]] = {
    "sql": ("crawlfleet.pipelines.sql.SqlStorePipeline", 800),
    "mongodb": ("crawlfleet.pipelines.mongo.MongoStorePipeline", 810),
    "redis": ("crawlfleet.pipelines.stream.RedisStreamPipeline", 820),
}


def _names(settings: BaseSettings, name: str, known: dict[str, tuple[str, int]]) -> list[str]:
    names = [n for n in (str(v).strip() for v in settings.getlist(name)) if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"{name} has unknown names {unknown}; known: {', '.join(known)}")
    return names


def check(settings: BaseSettings) -> None:
    """Validate every crawlfleet setting now, before Scrapy builds any component: a
    mistake stops the node with one line naming the setting (ConfigError)."""
    from crawlfleet.frontier.config import FrontierConfig
    from crawlfleet.redis.config import RedisConfig
    from crawlfleet.revisit.config import revisit_policy
    from crawlfleet.settings.config import check_unknown

    check_unknown(settings)
    FrontierConfig.from_settings(settings, "spider")  # the real name comes later
    RedisConfig.from_settings(settings)
    revisit_policy(settings)


def check_given(given: Mapping[str, str]) -> None:
    """Validate the crawlfleet settings *given* as text (the settings of a run the
    manager starts through Scrapyd), over crawlfleet's defaults, as a node would at
    start: ConfigError naming the first that is wrong, before any node is started with
    it (a project's own settings.py, on the Scrapyd machine, is not seen here)."""
    from scrapy.settings import Settings

    from crawlfleet.settings.config import apply_defaults

    settings = Settings()
    settings.setdict({k: v for k, v in given.items() if k.startswith("CRAWLFLEET_")}, "cmdline")
    apply_defaults(settings)
    check(settings)


class Addon:
    """Turns a Scrapy project into a crawlfleet node."""

    #: say nothing (a command checking the settings before Scrapy applies the add-on)
    quiet = False

    def update_settings(self, settings: BaseSettings) -> None:
        try:
            self._update_settings(settings)
        except ConfigError as exc:
            if "scrapy.cmdline" not in sys.modules:
                raise  # a program running Scrapy handles it
            # under `scrapy crawl`: one line, not a traceback from inside Scrapy
            logger.error("crawlfleet: %s", exc)
            raise SystemExit(2) from None
        if "scrapy.cmdline" in sys.modules:
            _one_line_config_errors()

    def _update_settings(self, settings: BaseSettings) -> None:
        from crawlfleet.frontier.politeness import adopt_autothrottle
        from crawlfleet.revisit.config import revisit_mode
        from crawlfleet.settings.config import apply_defaults

        # the environment beats settings files (deployment), not -s on the command line
        apply_defaults(settings)
        settings.set("SCHEDULER", SCHEDULER, priority="addon")
        _take_over_scrapy_redis(settings, say=not self.quiet)
        # Scrapy's AutoThrottle acts per process: the fleet's back-off stands in for it
        adopt_autothrottle(settings)
        for name, value in SCRAPY_DEFAULTS.items():
            settings.set(name, value, priority="addon")
        self._component(settings, "EXTENSIONS", STATS_FILE, 900)
        self._component(settings, "EXTENSIONS", TELEMETRY, 910)
        self._component(settings, "EXTENSIONS", FEEDBACK, 920)
        # off (NotConfigured) unless CRAWLFLEET_CAMPAIGN
        self._component(settings, "EXTENSIONS", CAMPAIGN_FEEDER, 930)
        self._component(settings, "EXTENSIONS", RECRAWL_PHASE, 940)  # off: ROUNDS 0
        self._component(settings, "SPIDER_MIDDLEWARES", UNIT_META_MW, 950)
        # above RetryMiddleware (550): it sees a 429 before the retry
        self._component(settings, "DOWNLOADER_MIDDLEWARES", SITE_THROTTLE, 560)
        # last before the downloader (after HttpCacheMiddleware, 900): a rate-limited
        # request that cannot go out at its slot goes back for a new one
        self._component(settings, "DOWNLOADER_MIDDLEWARES", SEND_TIME, 950)
        # and at the wire, a slotted request's bytes leave at its slot (unless the
        # project named its own handler, scrapy-playwright's say, or turned SendTime
        # off: a request that missed its slot at the wire comes back through it)
        if _enabled(settings, "DOWNLOADER_MIDDLEWARES", SEND_TIME):
            for scheme in WIRE_SCHEMES:
                if not settings["DOWNLOAD_HANDLERS"].get(scheme):
                    settings["DOWNLOAD_HANDLERS"][scheme] = SEND_TIME_HANDLER
        # last before the engine (Scrapy's own start at 25): a page's output pauses for
        # the node's slots
        self._component(settings, "SPIDER_MIDDLEWARES", GIVE_WAY, 5)
        # next to the spider (Scrapy's MetaCopyDetectionMiddleware, 1000, aside): a
        # request the node knows for a duplicate goes no further
        self._component(settings, "SPIDER_MIDDLEWARES", KNOWN_DUPLICATES, 990)
        # before the identities (390): a session keeps one (off unless CRAWLFLEET_SESSIONS)
        self._component(settings, "DOWNLOADER_MIDDLEWARES", SESSIONS, 380)
        if settings.getbool("CRAWLFLEET_SESSIONS"):
            settings.set("COOKIES_ENABLED", True, priority="addon")  # a session's jar
        _unload_what_is_off(settings)
        # before Scrapy's DefaultHeadersMiddleware (400) and UserAgentMiddleware (500),
        # whose defaults then leave its headers alone (off unless CRAWLFLEET_USER_AGENTS)
        self._component(settings, "DOWNLOADER_MIDDLEWARES", BROWSER_HEADERS, 390)
        # in the place of Scrapy's RetryMiddleware (unless the project placed either):
        # a retry waits in the frontier, not in the node
        if not _placed(settings, "DOWNLOADER_MIDDLEWARES", SCRAPY_RETRY):
            settings["DOWNLOADER_MIDDLEWARES"][SCRAPY_RETRY] = None
        self._component(settings, "DOWNLOADER_MIDDLEWARES", RETRY, 550)
        # before Scrapy's HttpProxyMiddleware (750), which turns the proxy's credentials
        # into its header (off unless CRAWLFLEET_PROXY_ENABLED)
        self._component(settings, "DOWNLOADER_MIDDLEWARES", PROXIES, 740)
        # between the throttle and the retries: a ban goes back to the frontier
        self._component(settings, "DOWNLOADER_MIDDLEWARES", BAN_DETECTOR, 555)
        # below RetryMiddleware: it sees what spent its retries (off: NotConfigured)
        self._component(settings, "DOWNLOADER_MIDDLEWARES", FAILURES, 540)
        if revisit_mode(settings) != "off":  # off: neither is loaded
            # below the retries (550) and above the error registry (540): it sees what
            # spent its retries, and a 304 it ends is no failure
            self._component(settings, "DOWNLOADER_MIDDLEWARES", REVISITS, 545)
            # just below it: it marks the stored items of a page found gone
            self._component(settings, "DOWNLOADER_MIDDLEWARES", GONE_MARKS, 544)
            # it judges what the callback gave, after DepthMiddleware (900) took out
            # the requests too deep to follow
            self._component(settings, "SPIDER_MIDDLEWARES", CHANGES, 880)
        stages = _names(settings, "CRAWLFLEET_ITEM_STAGES", ITEM_STAGES)
        for stage in stages:
            self._component(settings, "ITEM_PIPELINES", *ITEM_STAGES[stage])
        if "encoding" in stages:
            # below HttpCompressionMiddleware (590): it sees decompressed bodies
            self._component(settings, "DOWNLOADER_MIDDLEWARES", CHARSET_MIDDLEWARE, 580)
        for store in _names(settings, "CRAWLFLEET_STORES", STORES):
            self._component(settings, "ITEM_PIPELINES", *STORES[store])
        check(settings)

    @staticmethod
    def _component(settings: BaseSettings, setting: str, path: str, order: int) -> None:
        if not _placed(settings, setting, path):
            settings[setting][path] = order


def waits_at_wire(settings: BaseSettings) -> bool:
    """Whether the node's http and https requests go through SEND_TIME_HANDLER (the
    add-on put it there: the project named no handler of its own), and SEND_TIME takes
    back what misses its slot there."""
    handlers = settings.getwithbase("DOWNLOAD_HANDLERS")
    return _enabled(settings, "DOWNLOADER_MIDDLEWARES", SEND_TIME) and all(
        component_path(handlers.get(s) or "") == SEND_TIME_HANDLER for s in WIRE_SCHEMES
    )


def _enabled(settings: BaseSettings, setting: str, path: str) -> bool:
    """Whether the component *path* is in *setting* with an order (not None)."""
    return any(
        component_path(key) == path and order is not None
        for key, order in settings.getwithbase(setting).items()
    )


def _placed(settings: BaseSettings, setting: str, path: str) -> bool:
    """Whether the project placed the component *path* in *setting* itself (an order, or
    None to leave it out), by its path or by its class."""
    return path in settings[setting] or any(
        component_path(key) == path for key in settings[setting]
    )


def _unload_what_is_off(settings: BaseSettings) -> None:
    """Leave the components of :data:`UNLOADED_WHEN_OFF` whose setting is off out of
    Scrapy's ``*_BASE`` dict: Scrapy imports every key of the project's own dict, even
    one set to None, but not those of the base."""
    for flag, (setting, path) in UNLOADED_WHEN_OFF.items():
        base = settings[f"{setting}_BASE"]
        if settings.getbool(flag) or _placed(settings, setting, path) or path not in base:
            continue
        base.delete(path, priority="addon")  # a project's own *_BASE (priority) stays


#: The scrapy-redis WARNINGs said in this process (a node says it once, however many
#: times its settings are built).
_said: set[str] = set()


def _take_over_scrapy_redis(settings: BaseSettings, *, say: bool = True) -> None:
    """crawlfleet's scheduler and seen-filter over scrapy-redis's, whatever their
    priority; one WARNING saying what is done with each scrapy-redis setting found
    (unless not *say*)."""
    from crawlfleet.redis.config import redis_url_from
    from crawlfleet.settings.scrapy_redis import take_over

    lines = take_over(settings, redis_url_from(settings)[1], SCHEDULER)
    if not lines or not say:
        return
    message = "crawlfleet takes over from scrapy-redis:\n  " + "\n  ".join(lines)
    if message not in _said:
        _said.add(message)
        logger.warning("%s", message)


class _ConfigErrorLine(logging.Filter):
    """Turns the traceback that asyncio logs for a crawl task that failed with a
    ConfigError (a component's setting, found when Scrapy builds it) into one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, ConfigError):
            record.msg, record.args = "crawlfleet: %s", (exc,)
            record.exc_info, record.exc_text = None, None
        return True


def fail_command(status: int) -> None:
    """Under ``scrapy crawl`` (``scrapy.cmdline``): make the command exit with *status*
    (a node that could not start). Scrapy's crawl command exits 0 for any spider that
    opened, whatever its close reason; the status it exits with is its command object's
    ``exitcode``, which only ``scrapy.cmdline.execute`` holds: it is found on the call
    stack (the crawl runs inside it). Elsewhere (``crawlfleet crawl``, a program running
    Scrapy) nothing is done: those read the spider's close reason."""
    if "scrapy.cmdline" not in sys.modules:
        return
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "execute" and frame.f_globals.get("__name__") in (
            "scrapy.cmdline",
            "__main__",
        ):
            command = frame.f_locals.get("cmd")
            if command is not None and hasattr(command, "exitcode"):
                command.exitcode = max(int(command.exitcode or 0), status)
                return
        frame = frame.f_back


def _one_line_config_errors() -> None:
    """Under ``scrapy crawl``: a ConfigError that stops the crawl task is one ERROR line
    (the exit status is Scrapy's, 1), not asyncio's "Task exception was never retrieved"
    with a traceback."""
    target = logging.getLogger("asyncio")
    if not any(isinstance(f, _ConfigErrorLine) for f in target.filters):
        target.addFilter(_ConfigErrorLine())
