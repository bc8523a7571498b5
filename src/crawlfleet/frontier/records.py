"""The records the frontier takes and gives (requests out, leases in, the job's state)
and the decoding of the job's hash fields, apart from the client that moves them
(:mod:`crawlfleet.frontier.client`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict

from crawlfleet.frontier.control import Desired
from crawlfleet.redis.replies import text

__all__ = [
    "BACKOFF_OVER_MS",
    "CHANGES_MAXLEN",
    "FEED_KEPT",
    "FEED_READ",
    "FINGERPRINT_BYTES",
    "MAX_SHARDS",
    "PRIORITY_LIMIT",
    "REVISIT_MARK",
    "REVISIT_SHARE",
    "SEED_KINDS",
    "WAITING",
    "BackoffOptions",
    "CommitBatch",
    "CommitResult",
    "HeartbeatOptions",
    "JobState",
    "LeaseAsk",
    "LeaseOptions",
    "LeaseResult",
    "Leased",
    "Outgoing",
    "Pacing",
    "Revisit",
    "SeedBatch",
    "SeenConfig",
    "SlowSites",
    "Untrack",
    "backoff_left",
    "check_share",
    "counter_value",
    "counter_values",
    "entry_fault",
    "entry_revisit",
    "offered_sites",
    "parse_throttle",
    "printable",
    "split_entry",
]

#: The holder of a request waiting for its not-before time in the former form (a lease
#: of this holder in the job's leases and owner keys): a Redis upgraded with some in
#: flight keeps them, and the reclaim still queues each once its time has come. A
#: request waits in the job's waiting set now (its due time, no lease, no owner: see
#: commit.lua). No node id starts with "~".
WAITING = "~retry"
#: Most fingerprints one commit reads from the job's feed (a node that starts late, or
#: fell behind, catches up over several commits), and about how many the feed keeps.
FEED_READ = 2000
FEED_KEPT = 50_000
#: Most shards a job may have (each is a hash tag, its own keys and a call per lease).
MAX_SHARDS = 1024
#: Bytes of a request fingerprint kept in the seen-filter (of Scrapy's 20).
FINGERPRINT_BYTES = 16
PRIORITY_LIMIT = 2**19
#: Events kept in a job's change stream (per shard) by default: older ones are trimmed
#: (``XADD ... MAXLEN ~``; setting CRAWLFLEET_CHANGES_MAXLEN).
CHANGES_MAXLEN = 100_000
#: The share of a site's requests taken from its revisits when it has both revisits and
#: new URLs queued (setting CRAWLFLEET_REVISIT_SHARE; see lua/_pop.lua).
REVISIT_SHARE = 0.5
#: What follows the score of a revisit's stored entry ("<score>.\0<site>\0<payload>":
#: still a number; see lua/_entry.lua).
REVISIT_MARK = b"."


@dataclass(frozen=True)
class SeenConfig:
    """How the job's seen-filter works: "exact", or "bloom" with its sizing."""

    mode: str = "exact"
    bloom_capacity: int = 1_000_000
    bloom_error_rate: float = 1e-6
    bloom_growth: float = 2.0
    bloom_tightening: float = 0.5


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A request on its way into the frontier. ``fp`` empty: bypass the seen-filter.
    ``delay_ms`` > 0: it waits that long (on Redis's clock) before it is queued for its
    site (a retry's back-off); until then it is in the job's waiting set (counted
    "leased" and "waiting")."""

    fp: bytes
    site: str
    priority: int
    payload: bytes
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class Revisit:
    """A finished lease of this node kept for a later visit: its entry's payload becomes
    *payload* and it waits *delay_ms* (in the job's waiting set, on Redis's clock),
    then is queued again with its priority and site, under the same rid. Applied only
    if the lease is still the node's (else nothing). *new*: first time kept (counter
    "tracked" + 1); *event*: b"" for none, else appended to the job's change stream."""

    rid: str
    delay_ms: int
    payload: bytes
    new: bool = False
    event: bytes = b""


@dataclass(frozen=True, slots=True)
class Untrack:
    """A finished lease of a tracked request acknowledged for good (the page is gone):
    like an ack, and counter "tracked" - 1; *event* as in :class:`Revisit`."""

    rid: str
    event: bytes = b""


@dataclass(frozen=True, slots=True)
class Leased:
    rid: str
    site: str
    payload: bytes
    #: when to send it: µs after Redis's clock at the lease (``now_us``, or its
    #: *clock*'s; None: at any time)
    slot_us: int | None = None
    #: how late after its slot it may still be sent (µs)
    late_us: int = 0
    #: what is wrong with its stored entry ("": nothing found; the payload is decoded
    #: later): the node sets such a request aside
    fault: str = ""
    #: the key that holds its entry while leased ("": not in Redis), for logs
    where: str = ""
    #: the clock its slot is on: "" the lease's ``now_us``, else a key of the lease's
    #: ``clocks`` (a shard's Redis)
    clock: str = ""


#: Kinds of seed key read (:class:`SeedBatch`); "busy" and "none" mean nothing was read.
SEED_KINDS = ("list", "set", "zset")


@dataclass(frozen=True)
class SeedBatch:
    """What a node read of a seed key: *kind* "list", "set" or "zset" (the key's type),
    "none" (no such key), "busy" (another node reads it now: nothing read) or another
    Redis type (a key seeds cannot be in); *left*: the entries in the key, these
    included (they stay there until the node has queued them)."""

    kind: str
    left: int
    entries: list[bytes]


@dataclass(frozen=True, slots=True)
class CommitBatch:
    """The arguments of one commit, as a frontier's ``_commit`` takes them (see
    :meth:`~crawlfleet.frontier.base.Committer.commit`)."""

    node: str
    requests: Sequence[Outgoing]
    acks: Sequence[str]
    bad: Sequence[str]
    known: int
    epoch: str
    revisits: Sequence[Revisit] = ()
    untracked: Sequence[Untrack] = ()
    #: the node's place in the job's feed of fingerprints its commits added (what it has
    #: read so far; see :meth:`~crawlfleet.frontier.base.Committer.commit`); -1: the
    #: node keeps no cache of seen fingerprints, the commit neither reads nor feeds it
    feed: int = -1


@dataclass(frozen=True)
class CommitResult:
    queued: int
    #: requests of the commit found in the seen-filter
    duplicates: int
    #: acknowledgements applied (of *acks*; revisits and untracks are counted apart)
    acked: int
    duplicate_indexes: list[int] = field(default_factory=list)  # 0-based
    #: the job's epoch (see :meth:`~crawlfleet.frontier.base.Committer.commit`;
    #: "": not read by this commit, a sharded one that left shard 0 out)
    epoch: str = ""
    #: the duplicates the node found itself that this commit counted (0 when its epoch
    #: was not the job's)
    known_counted: int = 0
    #: revisits applied (the lease was still the node's: it waits now)
    revisited: int = 0
    #: untracks applied (the lease was still the node's: it is gone for good)
    untracked: int = 0
    #: the node's new place in the feed (-1: not read), and the fingerprints read there,
    #: of the job's *epoch*
    feed_place: int = -1
    feed: list[bytes] = field(default_factory=list)


class LeaseOptions(TypedDict, total=False):
    """How a lease is made: the keyword arguments of every frontier's ``lease(node, n,
    sites, **options)``. Of the offered *sites*, least recently served first, up to *n*
    requests are leased to *node* until *lease_ms* from now, at most *per_site* of a
    site; the reply offers up to *offer_size* sites for the next lease.

    *intervals*: per site, the time (µs) between its slots across the cluster (0 or
    absent: no rate limit); a site's robots.txt Crawl-delay and its adaptive back-off
    (halving every *backoff_half_life_ms*) widen it. A request of a paced site comes with
    its slot (``Leased.slot_us``), at most *horizon_us* ahead, and how late it may be
    sent (``Leased.late_us``: *late* of its site, or *late_share* of a widened
    interval); at most *max_slots* per site (None: *per_site*), the first no sooner
    than *lead_us* from now (the node needs that long to receive and place it: its
    reply's way back, its event loop's lag). *budgets*: per site, the
    name of the budget it is paced in (absent: the site itself; a scope adds to it, see
    :mod:`crawlfleet.frontier.limits`). *robots_probe_ms* > 0 (the node obeys
    robots.txt): a site whose robots.txt is not known yet gives one request per that
    long, until ``set_robots`` records it. Defaults: :meth:`Pacing.of` and
    :func:`offered_sites`."""

    lease_ms: Required[int]
    per_site: Required[int]
    offer_size: Required[int]
    intervals: Sequence[int] | None
    budgets: Sequence[str] | None
    late: Sequence[int] | None
    backoff_half_life_ms: int
    robots_probe_ms: int
    horizon_us: int
    late_share: float
    max_slots: int | None
    lead_us: int


@dataclass(frozen=True)
class LeaseAsk:
    """A lease asked for with a commit (see
    :meth:`~crawlfleet.frontier.base.Committer.commit_lease`): up to *n* requests of
    *sites* for the commit's node, as *options* say (the arguments of ``lease``)."""

    n: int
    sites: Sequence[str]
    options: LeaseOptions


@dataclass(frozen=True)
class Pacing:
    """The pacing of a lease, its defaults filled in (see :class:`LeaseOptions`)."""

    backoff_half_life_ms: int
    robots_probe_ms: int
    horizon_us: int
    late_share: float
    max_slots: int
    lead_us: int

    @classmethod
    def of(cls, options: LeaseOptions) -> Pacing:
        max_slots = options.get("max_slots")
        return cls(
            options.get("backoff_half_life_ms", 30_000),
            options.get("robots_probe_ms", 0),
            options.get("horizon_us", 1_000_000),
            options.get("late_share", 0.0125),
            options["per_site"] if max_slots is None else max_slots,
            options.get("lead_us", 0),
        )


def offered_sites(sites: Sequence[str], options: LeaseOptions) -> list[tuple[str, int, str, int]]:
    """(site, interval µs, budget, late µs) of each offered site, as *options* give them
    (absent: no rate limit, the site's own budget, not late)."""
    intervals, budgets, late = options.get("intervals"), options.get("budgets"), options.get("late")
    return list(
        zip(
            sites,
            [0] * len(sites) if intervals is None else intervals,
            sites if budgets is None else budgets,
            [0] * len(sites) if late is None else late,
            strict=True,
        )
    )


class HeartbeatOptions(TypedDict, total=False):
    """What a node says in a heartbeat: the keyword arguments of every frontier's
    ``heartbeat(node, **beat)``. The node is alive for *ttl_ms* with its *status* (a JSON
    object, published for ``job status``; "leaving": it is gone, and leaves the
    registry), *busy* or not (work in flight), and renews its leases *renew* (absent:
    none) for *lease_ms* from now."""

    ttl_ms: Required[int]
    status: Required[str]
    busy: Required[bool]
    lease_ms: Required[int]
    renew: Sequence[str]


class BackoffOptions(TypedDict, total=False):
    """How slow sites are backed off: the keyword arguments of every frontier's
    ``backoff(slow, **options)``. A site reported with a floor alone starts its back-off
    at *first_ms*; each site's back-off doubles (at most once per its current interval,
    up to *longest_ms*) and halves every *half_life_ms*. Sites in *latency* are reported
    for their latency alone (such a back-off ends on ``recovered``). Defaults:
    :meth:`SlowSites.of`."""

    first_ms: int
    longest_ms: int
    half_life_ms: int
    latency: Iterable[str]


@dataclass(frozen=True)
class SlowSites:
    """The sites of a ``backoff`` call, its defaults filled in (see
    :class:`BackoffOptions`): (site, floor ms, first back-off ms, for its latency
    alone) each."""

    sites: list[tuple[str, int, int, bool]]
    longest_ms: int
    half_life_ms: int

    @classmethod
    def of(cls, slow: Mapping[str, int | tuple[int, int]], options: BackoffOptions) -> SlowSites:
        first_ms, latency = options.get("first_ms", 1000), set(options.get("latency", ()))
        sites = []
        for site, report in slow.items():
            floor, first = report if isinstance(report, tuple) else (report, first_ms)
            sites.append((site, int(floor), int(first), site in latency))
        return cls(sites, options.get("longest_ms", 60_000), options.get("half_life_ms", 30_000))


@dataclass(frozen=True)
class LeaseResult:
    now_us: int  #: Redis's clock at the lease
    entries: list[Leased]
    offer: list[str]
    queued: int = 0  #: requests still queued in the job after this lease
    #: requests leased in the job (every node; those waiting for their time included)
    #: after this lease
    leased: int = 0
    #: µs until the first rate-limited site skipped by this call is ready (-1: none)
    ready_in_us: int = -1
    #: the job's control command sequence (see :meth:`Frontier.control_seq`)
    control_seq: int = 0
    #: sites whose back-off ended (decayed) in this call
    backoff_ended: list[str] = field(default_factory=list)
    #: Redis's clock at the lease (µs) on each clock an entry names other than ""
    #: (the shards of a sharded frontier, each its own Redis)
    clocks: dict[str, int] = field(default_factory=dict)
    #: the job's epoch (shard 0's; "": none yet, or not read), as a commit names it:
    #: a node whose seen cache is of another epoch forgets it before it takes *entries*
    epoch: str = ""


@dataclass(frozen=True)
class JobState:
    now_ms: int
    queued: int
    #: requests out of the queues and not finished: leased to a node, or waiting for
    #: their time (see *waiting*)
    leased: int
    live_nodes: int
    busy_others: int
    #: the job's own run-time rate limits (site pattern -> "H/Ws"), read with the state
    limits: dict[str, str] = field(default_factory=dict)
    #: the control commands addressed to this node (see crawlfleet.frontier.control)
    control: Desired = field(default_factory=Desired)
    #: requests ever leased in the job (0: it never had any work)
    leased_total: int = 0
    #: the run-time rate limits every job shares (site pattern -> "H/Ws")
    fleet_limits: dict[str, str] = field(default_factory=dict)
    #: requests waiting for their time (retries backing off, tracked requests between
    #: visits): counted in *leased*; while there are some the job cannot finish
    waiting: int = 0

    @property
    def empty(self) -> bool:
        """Nothing queued, nothing leased, no other node busy."""
        return self.queued <= 0 and self.leased == 0 and self.busy_others == 0


def counter_value(raw: Any) -> int:
    """A counter of the job's hash as read (None, bytes or str): 0 when absent or not a
    whole number (the scripts repair such a counter at its next change)."""
    try:
        return int(raw) if raw is not None else 0
    except (TypeError, ValueError):
        return 0


def counter_values(reply: Mapping[Any, Any]) -> dict[str, int]:
    """A job's counters hash as HGETALL returns it: name -> :func:`counter_value`."""
    return {text(k): counter_value(v) for k, v in reply.items()}


def parse_throttle(raw: Mapping[Any, Any]) -> dict[str, dict[str, int]]:
    """A job's throttle hash as read: {"backoff": site -> interval ms (as last raised,
    before decay), "robots": site -> Crawl-delay ms (0: read, none)}. Robots probes
    and unreadable fields are left out."""
    out: dict[str, dict[str, int]] = {"backoff": {}, "robots": {}}
    for key, value in raw.items():
        kind, _, site = text(key).partition(":")
        number = text(value).partition(":")[0]
        if number.isdigit() and kind in ("b", "r"):
            out["backoff" if kind == "b" else "robots"][site] = int(number)
    return out


#: A back-off decayed below this many milliseconds is over (as lease.lua sees it).
BACKOFF_OVER_MS = 10


def backoff_left(raw: Any, now_ms: int, half_life_ms: int) -> float:
    """The interval (ms) left now of a site's back-off as stored in the throttle hash
    (``"<interval ms>:<set at ms>:<cause>"``, see ``_backoff.lua``): it halves every
    *half_life_ms* since it was set; 0.0 for none."""
    if raw is None:
        return 0.0
    ms, _, rest = text(raw).partition(":")
    at = rest.partition(":")[0]
    if not (ms.isdigit() and at.isdigit()):
        return 0.0
    halvings = max(0, now_ms - int(at)) / max(1, half_life_ms)
    return int(ms) * math.pow(0.5, halvings)


def printable(value: bytes | str, limit: int = 200) -> str:
    """*value* cut to *limit* characters, for a log line: what does not print (control
    characters, bytes that are not UTF-8) is escaped."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "backslashreplace")
    value = value[:limit]
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def entry_fault(entry: bytes) -> str:
    """What is wrong with a stored ``<score>\\0<site>\\0<payload>`` entry ("": nothing);
    the same words as ``entry_fault`` of ``lua/_entry.lua``."""
    shape = '(not "<score>\\0<site>\\0<payload>")'
    a = entry.find(b"\0")
    if a < 0:
        return f"no separator {shape}"
    if entry.find(b"\0", a + 1) < 0:
        return f"one separator only {shape}"
    try:
        float(entry[:a])
    except ValueError:
        return f"score '{printable(entry[:a], 40)}' is not a number"
    return ""


def entry_revisit(entry: bytes) -> bool:
    """Whether a well-formed stored entry is a revisit's (its score marked)."""
    a = entry.find(b"\0")
    return a > 0 and entry[a - 1 : a] == REVISIT_MARK


def check_share(share: float) -> float:
    """*share* if it is a number from 0 to 1, else ValueError."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
        raise ValueError(f"the revisit share must be a number from 0 to 1, not {share!r}")
    return float(share)


def split_entry(entry: bytes) -> tuple[str, bytes]:
    """(site, payload) of a stored ``<score>\\0<site>\\0<payload>`` entry."""
    a = entry.index(b"\0")
    b = entry.index(b"\0", a + 1)
    return entry[a + 1 : b].decode(), entry[b + 1 :]
