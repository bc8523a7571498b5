"""A Scrapy project's politeness settings, as the fleet takes them.

Scrapy's politeness acts per process; under crawlfleet a site's pace is a budget of the
whole fleet (:mod:`crawlfleet.frontier.limits`), so each setting keeps its meaning
this way:

- ``DOWNLOAD_DELAY`` (or a spider's ``download_delay``, which Scrapy makes the same
  setting) becomes every site's fleet-wide budget: one request per delay across all
  nodes (``"*": "1/<delay>s"``, to the microsecond), unless ``CRAWLFLEET_RATE_LIMITS``
  names the site (a host, ``*.domain``, or ``*`` for every site it does not name). A
  ``DOWNLOAD_SLOTS`` entry's ``delay`` becomes its host's budget the same way. The
  per-process delay is then off on every node (:func:`crawlfleet.node.engine.
  no_process_delay`): the frontier's slots pace the sends, and a node that also slept
  would send behind its slots. Scrapy's jitter (``DOWNLOAD_DELAY_JITTER``,
  ``RANDOMIZE_DOWNLOAD_DELAY``) is not applied: it would bring requests closer than
  the delay; slots are evenly spaced instead, ``CRAWLFLEET_RATE_LIMIT_MARGIN`` wider.
- ``CONCURRENT_REQUESTS_PER_DOMAIN`` and ``_PER_IP`` stay per node: they bound the
  requests a node has in flight to a site, not the site's rate.
- ``AUTOTHROTTLE_ENABLED``: Scrapy's AutoThrottle extension is disabled (it would
  adapt each process's delay on its own, and its delays would make a node miss its
  slots); the fleet's shared back-off (:mod:`crawlfleet.middlewares.throttle`), on
  429/503 and on a climbing latency, stands in for it. ``AUTOTHROTTLE_MAX_DELAY``
  becomes ``CRAWLFLEET_BACKOFF_MAX_SECONDS`` and ``AUTOTHROTTLE_START_DELAY`` the
  first back-off interval, ``CRAWLFLEET_BACKOFF_START_SECONDS``, where the project
  sets them and not the crawlfleet settings. ``AUTOTHROTTLE_TARGET_CONCURRENCY``
  has no fleet meaning: the latency back-off brings a slow site down to about one
  request at a time for the whole fleet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scrapy.settings import SETTINGS_PRIORITIES, BaseSettings

from crawlfleet.frontier.limits import Limit, RateLimits, delay_limit

__all__ = ["AUTOTHROTTLE", "AUTOTHROTTLE_SETTINGS", "ScrapyPoliteness", "adopt_autothrottle"]

AUTOTHROTTLE = "scrapy.extensions.throttle.AutoThrottle"
#: AutoThrottle's settings that keep a meaning -> the crawlfleet setting they become.
AUTOTHROTTLE_SETTINGS = {
    "AUTOTHROTTLE_MAX_DELAY": "CRAWLFLEET_BACKOFF_MAX_SECONDS",
    "AUTOTHROTTLE_START_DELAY": "CRAWLFLEET_BACKOFF_START_SECONDS",
}


def _set_by_project(settings: BaseSettings, name: str, above: str) -> bool:
    return (settings.getpriority(name) or 0) > SETTINGS_PRIORITIES[above]


def adopt_autothrottle(settings: BaseSettings) -> list[str]:
    """With ``AUTOTHROTTLE_ENABLED``: disable Scrapy's AutoThrottle and give its delays
    to the fleet's back-off (see the module docstring). Called by the add-on, before
    Scrapy builds anything. Returns the settings it mapped ("A -> B")."""
    if not settings.getbool("AUTOTHROTTLE_ENABLED"):
        return []
    settings["EXTENSIONS"][AUTOTHROTTLE] = None
    mapped: list[str] = []
    longest = settings.getfloat("AUTOTHROTTLE_MAX_DELAY")
    for scrapy_name, ours in AUTOTHROTTLE_SETTINGS.items():
        if _set_by_project(settings, scrapy_name, "default") and not _set_by_project(
            settings, ours, "addon"
        ):
            value = settings.getfloat(scrapy_name)
            if ours == "CRAWLFLEET_BACKOFF_START_SECONDS":
                value = min(value, settings.getfloat("CRAWLFLEET_BACKOFF_MAX_SECONDS"), longest)
            settings.set(ours, max(value, 0.01), priority="addon")
            mapped.append(f"{scrapy_name} -> {ours}")
    return mapped


@dataclass(frozen=True)
class ScrapyPoliteness:
    """What a project's Scrapy politeness settings say (see the module docstring)."""

    #: DOWNLOAD_DELAY in seconds (the spider's download_delay where Scrapy takes it)
    delay: float = 0.0
    #: where the delay came from ("DOWNLOAD_DELAY" or "the spider's download_delay")
    delay_source: str = "DOWNLOAD_DELAY"
    #: the per-process delay's random variation (a share of it; 0: none)
    jitter: float = 0.0
    #: DOWNLOAD_SLOTS entries' delays: slot (host) -> seconds
    slot_delays: dict[str, float] = field(default_factory=dict)
    per_domain: int = 8
    per_ip: int = 0
    autothrottle: bool = False

    @classmethod
    def from_settings(
        cls, settings: BaseSettings, spider_delay: float | None = None
    ) -> ScrapyPoliteness:
        """The settings' politeness; *spider_delay*: a spider's ``download_delay`` on
        a Scrapy that reads it itself (before 2.19, which makes it DOWNLOAD_DELAY)."""
        delay, source = settings.getfloat("DOWNLOAD_DELAY"), "DOWNLOAD_DELAY"
        if spider_delay is not None:
            delay, source = float(spider_delay), "the spider's download_delay"
        if "DOWNLOAD_DELAY_JITTER" in settings or "RANDOMIZE_DOWNLOAD_DELAY" in settings:
            if _set_by_project(settings, "RANDOMIZE_DOWNLOAD_DELAY", "default"):
                jitter = 0.5 if settings.getbool("RANDOMIZE_DOWNLOAD_DELAY") else 0.0
            else:
                jitter = settings.getfloat("DOWNLOAD_DELAY_JITTER", 0.5)
        else:
            jitter = 0.0
        slots: dict[str, float] = {}
        for key, entry in settings.getdict("DOWNLOAD_SLOTS").items():
            value = entry.get("delay") if isinstance(entry, dict) else None
            if isinstance(value, int | float) and value > 0:
                slots[str(key).strip().lower()] = float(value)
        return cls(
            delay=max(0.0, delay),
            delay_source=source,
            jitter=jitter,
            slot_delays=slots,
            per_domain=settings.getint("CONCURRENT_REQUESTS_PER_DOMAIN"),
            per_ip=settings.getint("CONCURRENT_REQUESTS_PER_IP"),
            autothrottle=settings.getbool("AUTOTHROTTLE_ENABLED"),
        )

    def defaults(self, margin: float) -> dict[str, Limit]:
        """The budgets the delays make: ``"*"`` from the delay, each slot's host from
        its own."""
        made: dict[str, Limit] = {}
        for pattern, seconds in (("*", self.delay), *self.slot_delays.items()):
            limit = delay_limit(seconds, margin=margin)
            if limit is not None:
                made[pattern] = limit
        return made

    def budgets(self, configured: RateLimits, margin: float) -> RateLimits:
        """*configured* (CRAWLFLEET_RATE_LIMITS), with the delays' budgets for every
        pattern it does not name."""
        return configured.filled(self.defaults(margin))

    def describe(self, configured: RateLimits, *, backoff_start: float, backoff_max: float) -> str:
        """One line: how each setting was taken (logged by every node at start)."""
        parts: list[str] = []
        if self.delay > 0:
            what = f"{self.delay_source} {self.delay:g}s"
            if "*" in configured.limits:
                parts.append(
                    f"{what}: not a budget (CRAWLFLEET_RATE_LIMITS['*'] paces every "
                    "site it does not name)"
                )
            else:
                named = sorted(p for p in configured.limits if p != "*")
                unless = f" (CRAWLFLEET_RATE_LIMITS sets {', '.join(named)})" if named else ""
                parts.append(
                    f"{what} -> a fleet-wide budget of 1 request per {self.delay:g}s for "
                    f"every{' other' if named else ''} site{unless}"
                )
        else:
            parts.append(f"{self.delay_source} 0: no budget from it")
        for host, seconds in sorted(self.slot_delays.items()):
            if host in configured.limits:
                parts.append(f"DOWNLOAD_SLOTS[{host!r}] delay: CRAWLFLEET_RATE_LIMITS names it")
            else:
                parts.append(f"DOWNLOAD_SLOTS[{host!r}] delay {seconds:g}s -> its budget")
        off = "per-process delay off"
        if self.jitter and (self.delay > 0 or self.slot_delays):
            off += ", its jitter not applied (slots are evenly spaced)"
        parts.append(off)
        parts.append(
            f"CONCURRENT_REQUESTS_PER_DOMAIN {self.per_domain} and _PER_IP {self.per_ip}: "
            "per node (requests in flight)"
        )
        if self.autothrottle:
            parts.append(
                "AUTOTHROTTLE_ENABLED: Scrapy's AutoThrottle off, the fleet's shared "
                f"back-off on 429/503 and slow answers instead ({backoff_start:g}s "
                f"doubling up to {backoff_max:g}s)"
            )
        return "Politeness across the fleet: " + "; ".join(parts)
