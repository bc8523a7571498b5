"""Request bodies of the API (typed, validated: an unknown field is refused)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from crawlfleet.frontier.config import validate_job_name
from crawlfleet.state.models import check_name

__all__ = [
    "AlertRuleBody",
    "CampaignBody",
    "CancelBody",
    "ControlBody",
    "ErrorReason",
    "ExtendBody",
    "IdPath",
    "JobName",
    "JobPath",
    "LimitsBody",
    "NamePath",
    "NodeControlBody",
    "ProjectName",
    "ProxiesBody",
    "ProxyIdPath",
    "RecrawlBody",
    "ResetBody",
    "RunBody",
    "ScrapydBody",
    "SeedsBody",
    "SignInBody",
    "SpiderName",
    "TimerBody",
    "TimerPatch",
    "plain_name",
]

Command = Literal["pause", "resume", "drain", "stop", "concurrency"]


def plain_name(value: str) -> str:
    """*value* if it can name a file or a path segment elsewhere (a Scrapyd project,
    version or spider): printable, no '/' or '\\', not dots only; else ValueError."""
    if not value.isprintable() or "/" in value or "\\" in value or not value.strip("."):
        raise ValueError("must be printable, without '/' or '\\', and not dots only")
    return value


def _record_name(value: str) -> str:
    return check_name("the", value)


#: A job's name in a path or a body (crawlfleet.frontier.config.validate_job_name).
JobName = Annotated[str, AfterValidator(validate_job_name)]
JobPath = Annotated[str, Path(description="the job's name"), AfterValidator(validate_job_name)]
#: The name of a timer, alert rule, Scrapyd or campaign in a path: 1-64 letters,
#: digits, . _ - (what such a name may be; one that does not exist is a 404).
NamePath = Annotated[str, Path(max_length=64), AfterValidator(_record_name)]
#: A row id of the state DB in a path (SQL integers stop at 2**63 - 1).
IdPath = Annotated[int, Path(ge=1, le=2**62)]
#: a proxy's id in the pool (crawlfleet proxies status shows it)
ProxyIdPath = Annotated[str, Path(pattern=r"^[0-9a-f]{12}$", description="the proxy's id")]
#: A Scrapyd project (scrapy.cfg's [deploy] project), version or spider name.
ProjectName = Annotated[
    str,
    Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.-]+$"),
    AfterValidator(plain_name),
]
SpiderName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(plain_name)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: Longest seed entry the API takes (a URL, or a JSON entry with its meta).
SEED_MAX_CHARS = 8192


class SeedsBody(_Body):
    #: URLs or JSON seed entries, as `crawlfleet seed` takes them (the body is at most
    #: CRAWLFLEET_MANAGER_MAX_BODY bytes)
    seeds: list[Annotated[str, Field(max_length=SEED_MAX_CHARS)]] = Field(
        min_length=1, max_length=10_000
    )


class ControlBody(_Body):
    command: Command
    #: concurrency: requests at once (1 to 10000)
    value: int | None = None
    #: one node of the job (default: every node)
    node: str | None = None
    #: wait this long for the nodes' acknowledgements (0: do not wait)
    wait_seconds: float = Field(default=0.0, ge=0, le=60)


class NodeControlBody(_Body):
    command: Command
    value: int | None = None
    #: the node's job, when the node id is on several
    job: JobName | None = None
    wait_seconds: float = Field(default=0.0, ge=0, le=60)


class LimitsBody(_Body):
    #: site pattern ("host", "*.domain", "*") -> "H/W" (2/1s, 30/1m)
    limits: dict[str, str] = Field(min_length=1, max_length=1000)


class ResetBody(_Body):
    #: reset even while nodes are alive on the job
    force: bool = False
    #: keep the job's run-time rate limits
    keep_limits: bool = False


class ScrapydBody(_Body):
    name: str = Field(min_length=1, max_length=64)
    #: http(s)://host:port of its API
    url: str = Field(min_length=1, max_length=500)
    username: str | None = Field(default=None, max_length=200)
    password: str | None = Field(default=None, max_length=500)
    #: ask it for its status before registering it
    check: bool = True


class RunBody(_Body):
    spider: SpiderName
    #: the Scrapyd project (scrapy.cfg's [deploy] project)
    project: ProjectName
    #: "all", "least-loaded" (from Scrapyd's running jobs and the nodes' CPU), or names
    nodes: Literal["all", "least-loaded"] | list[str] = "least-loaded"
    #: processes per node named ("all" or a list), or processes in all ("least-loaded")
    count: int = Field(default=1, ge=1, le=100)
    #: Scrapy settings for the processes (CRAWLFLEET_JOB and the key prefix are set)
    settings: dict[str, str] = Field(default_factory=dict, max_length=200)
    #: spider arguments
    args: dict[str, str] = Field(default_factory=dict, max_length=200)


class CancelBody(_Body):
    #: seconds between TERM and KILL
    grace_seconds: float = Field(default=10.0, ge=0, le=600)


class TimerBody(_Body):
    name: str = Field(min_length=1, max_length=64)
    job: JobName
    action: Literal["run", "pause", "resume", "drain", "stop"]
    #: 5 fields (minute hour day month weekday; UTC), or 6 with seconds last
    cron: str = Field(min_length=1, max_length=200)
    #: for "run": what POST /api/v1/jobs/{job}/run takes
    run: RunBody | None = None


class TimerPatch(_Body):
    enabled: bool


class AlertRuleBody(_Body):
    name: str = Field(min_length=1, max_length=64)
    #: one job, or every job (null)
    job: JobName | None = None
    #: one of GET /api/v1/alerts/metrics
    metric: str = Field(min_length=1, max_length=64)
    op: Literal[">", ">=", "<", "<=", "==", "!="]
    threshold: float
    #: how long the condition must hold before the alert fires
    for_seconds: float = Field(default=0.0, ge=0, le=7 * 86400)
    #: where firing and resolved alerts are POSTed (never shown back: it may hold a token)
    webhook: str = Field(min_length=1, max_length=1000)
    #: the HMAC-SHA256 signing secret (default: made, and shown once)
    secret: str | None = Field(default=None, min_length=16, max_length=200)


class SignInBody(_Body):
    #: a token from `crawlfleet manager token create`
    token: str = Field(min_length=1, max_length=200)


#: crawlfleet.state.errors.REASONS
ErrorReason = Literal["http", "exception", "parse", "item", "invalid", "ban"]


class RecrawlBody(_Body):
    #: only failures of this reason (default: every open one)
    reason: ErrorReason | None = None
    limit: int = Field(default=10_000, ge=1, le=100_000)


class CampaignBody(_Body):
    """A new campaign, as ``crawlfleet campaign create`` takes it."""

    name: str = Field(min_length=1, max_length=64)
    job: JobName
    #: start URL template: {date} ({date:%Y/%m/%d}), {category}, {keyword}
    url: str = Field(default="", max_length=2000)
    spider: str = Field(default="", max_length=500)
    date_from: str | None = Field(default=None, alias="from")
    date_to: str | None = Field(default=None, alias="to")
    step: Literal["day", "week", "month"] = "day"
    categories: list[str] = Field(default_factory=list, max_length=100_000)
    keywords: list[str] = Field(default_factory=list, max_length=100_000)
    max_attempts: int = Field(default=3, ge=1, le=100)
    units_ahead: int = Field(default=20, ge=1, le=100_000)


class ProxiesBody(_Body):
    #: proxy URLs (http(s)://user:pass@host:port); passwords are never shown back
    proxies: list[Annotated[str, Field(min_length=1, max_length=2000)]] = Field(
        min_length=1, max_length=10_000
    )


class ExtendBody(_Body):
    #: the new last date
    to: str = Field(min_length=10, max_length=10)
