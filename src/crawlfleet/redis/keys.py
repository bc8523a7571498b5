"""The Redis key schema: every key crawlfleet uses is built here, nowhere else.

All keys of one job share the hash tag ``{job}``, so that a Redis Cluster keeps a job's
keys in one slot. Politeness is the fleet's, not a job's: a site's budget, back-off and
robots.txt delay are shared by every job that crawls it, under the hash tag
``{polite}``. On one Redis, the lease and heartbeat scripts touch both; on a cluster a
lease takes a script in each slot and a heartbeat reads the fleet's limits apart
(crawlfleet.frontier.client, docs/scaling.md). The names "polite" and "proxies" are not
job names (crawlfleet.frontier.config.RESERVED_JOB_NAMES).

A job created with N > 1 shards (CRAWLFLEET_SHARDS) keeps its queues, leases and
seen-filter in N sets of the keys below: shard 0 under ``{<job>}``, shard k under
``{<job>#k}`` or ``{<job>#k.<salt>}`` ("#" is not allowed in job names): the salt, the
smallest that does it, puts each shard in an N-th of the cluster's slots of its own, so
that shards spread evenly over masters that serve even ranges of slots (see
:func:`shard_tag`). A site and every URL of it belong to one shard, by a stable
hash of the site (crawlfleet.frontier.sharded). The node registry, control commands,
run-time limits, summaries and item streams are the job's, in shard 0 only; every shard
keeps its own ``nodes`` (for reclaiming a dead node's leases) and counters::

    <prefix>:jobs                      set    names of the jobs known to this Redis
    <prefix>:{polite}:limits           hash   site pattern -> rate limit ("2/1s") for every
                                              job, set at run time (crawlfleet limits
                                              --fleet)
    <prefix>:{polite}:pace             hash   budget (site, or site within a scope, or
                                              site of one job given its own limit) -> its
                                              last send time (slot) granted (µs, Redis
                                              clock): the next slot counts from it
    <prefix>:{polite}:throttle         hash   "b:<site>" -> adaptive back-off; "r:<site>"
                                              -> robots.txt Crawl-delay (ms); "p:<site>"
                                              -> end of the current robots.txt probe
    <prefix>:{<job>}:shards            string the job's shard count, set when it is created
    <prefix>:{<job>}:sites             zset   site -> serve order (round robin)
    <prefix>:{<job>}:q:<site>          zset   rid -> score (-priority * 2^32 + seq) of the
                                              site's requests at priorities other than 0
    <prefix>:{<job>}:f:<site>          list   "<rid>\\0<payload>": the site's queued
                                              requests at priority 0, first in first
                                              out (no req entry until leased: the lean
                                              form most requests take)
    <prefix>:{<job>}:v:<site>          list   the site's revisits whose time came, first
                                              due first: "<rid>\\0<payload>" (priority
                                              0, lean) or "<rid>" (entry in req); taken
                                              with the site's new URLs at the revisit
                                              share (frontier/lua/_pop.lua)
    <prefix>:{<job>}:credit            hash   site -> its revisit credit, while it has
                                              both revisits and new URLs queued
    <prefix>:{<job>}:req               hash   rid -> "<score>\\0<site>\\0<payload>" of
                                              every request not in a FIFO list
    <prefix>:{<job>}:leases            zset   rid -> lease deadline (ms, Redis clock) of
                                              the requests leased to a node
    <prefix>:{<job>}:owner             hash   rid -> node id holding the lease
    <prefix>:{<job>}:waiting           zset   rid -> due time (ms, Redis clock) of the
                                              requests waiting for their time (a retry's
                                              back-off, a tracked request between two
                                              visits): no lease, no owner; queued by the
                                              reclaim once due (expired.lua)
    <prefix>:{<job>}:counters          hash   seq, queued, leased, enqueued, ...; epoch
                                              (set by the first commit, new after a
                                              reset: see commit.lua)
    <prefix>:{<job>}:bad               list   malformed entries set aside
    <prefix>:{<job>}:nodes             zset   node id -> time (ms) it counts as dead
    <prefix>:{<job>}:nodeinfo          hash   node id -> JSON status
    <prefix>:{<job>}:busy              zset   node id -> time (ms) it counts as busy
    <prefix>:{<job>}:reaped            zset   node id -> time (ms) its leases were returned
                                              after it missed its heartbeats
    <prefix>:{<job>}:control           hash   "<scope>:<kind>" -> JSON {seq, value, at}:
                                              commands for nodes (frontier.control)
    <prefix>:{<job>}:limits            hash   site pattern -> the job's own rate limit
                                              ("2/1s"; the job gets its own budget for
                                              those sites), set at run time (crawlfleet
                                              limits JOB)
    <prefix>:{<job>}:summaries         hash   node id -> JSON summary of its run, written
                                              when it closes (crawlfleet job status)
    <prefix>:{<job>}:seen              set    exact mode: binary fingerprints
    <prefix>:{<job>}:bloom             hash   Bloom mode: layer parameters and counts
    <prefix>:{<job>}:bloom:<n>         string Bloom mode: bitmap of layer n (1-based)
    <prefix>:{<job>}:feed              list   the fingerprints the job's commits added to
                                              its seen-filter, newest last, the newest
                                              50,000 or so kept; read by each node into
                                              its cache of seen fingerprints (commit.lua)
    <prefix>:{<job>}:items             stream item records for item workers (entry format
                                              in crawlfleet.pipelines.stream)
    <prefix>:{<job>}:items:dead        stream entries item workers could not store, each
                                              with its entry id, reason and fields
    <prefix>:{<job>}:changes           stream the job's change stream: one field "e", the
                                              event a node gave with a revisit or an
                                              untrack (commit.lua), trimmed to about
                                              CRAWLFLEET_CHANGES_MAXLEN; one per shard

The item and change streams are output, not crawl state: they are not in
``JobKeys.fixed()``, so resetting a job's crawl keeps what their consumers have not read
yet.

The seed key read for scrapy-redis compatibility (the spider's ``redis_key``, by default
``<spider>:start_urls``: a list, set or sorted set) is the user's own key and lives
outside this schema. Two keys of crawlfleet's sit in its hash slot (see
:func:`seed_keys`)::

    <seed key>:crawlfleet:reader       string node id reading the seed key (expires)
    <seed key>:crawlfleet:unreadable   list   entries no request could be made from

(with ``{<seed key>}`` in place of ``<seed key>`` when the key has no hash tag of its own).

The fleet's proxy pool (crawlfleet.fleet.proxies), every job's, under the hash tag
``{proxies}``::

    <prefix>:{proxies}:all             hash   proxy id -> proxy URL, sealed when it holds
                                              credentials (crawlfleet.state.sealing)
    <prefix>:{proxies}:live            zset   proxy id -> uses so far: the pool
    <prefix>:{proxies}:cool            zset   proxy id -> end of its rest after a failure
                                              (ms, Redis clock)
    <prefix>:{proxies}:bans            zset   "<site>|<proxy id>" -> end of the site's ban
                                              (or rest) of the proxy (ms)
    <prefix>:{proxies}:gone            hash   proxy id -> why it left the pool
    <prefix>:{proxies}:stats           hash   "<id>:ok", "<id>:fail", ... -> counts (see
                                              fleet/lua/proxy_report.lua)
    <prefix>:{proxies}:refill          string lock: one node at a time asks the proxy
                                              provider for more (expires)

Each Lua script's KEYS are listed here too, by one method per script, named
``for_<script>`` (``JobKeys.for_lease``, ``FleetKeys.for_pace``, ``SeedKeys.for_seeds_read``,
``ProxyKeys.for_proxy_pick``, ...): the script's fixed keys in the order its Lua file
names them at its top (``local sites_key, req_key = KEYS[1], KEYS[2]``), then the keys
that vary with a call (the seen-filter's, each offered site's queues), as its header
says. Callers pass that list as it is: no key list is built anywhere else.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from redis.crc import key_slot

__all__ = ["FleetKeys", "JobKeys", "ProxyKeys", "SeedKeys", "jobs_key", "seed_keys", "shard_tag"]

#: Hash slots of a Redis Cluster.
SLOTS = 16384


def jobs_key(prefix: str) -> str:
    """The set of job names known to this Redis (for listings; not used in scripts)."""
    return f"{prefix}:jobs"


@dataclass(frozen=True)
class SeedKeys:
    """A seed key and crawlfleet's keys beside it (in its hash slot)."""

    #: the user's key (list, set or sorted set of start URLs)
    seed: str
    #: node id of the node reading it (see frontier/lua/seeds_read.lua)
    reader: str
    #: entries set aside as unreadable
    unreadable: str

    def for_seeds_read(self) -> list[str]:
        """The KEYS of seeds_read.lua."""
        return [self.seed, self.reader]

    def for_seeds_done(self) -> list[str]:
        """The KEYS of seeds_done.lua."""
        return [self.seed, self.reader, self.unreadable]


def _has_tag(key: str) -> bool:
    """*key* has a hash tag: a ``{...}`` with something inside (Redis Cluster's rule)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return end > start + 1


def seed_keys(seed: str) -> SeedKeys:
    """The keys of seed key *seed*, all in its hash slot: its hash tag when it has one,
    else the whole key as the tag of crawlfleet's."""
    base = seed if _has_tag(seed) else f"{{{seed}}}"
    return SeedKeys(seed, f"{base}:crawlfleet:reader", f"{base}:crawlfleet:unreadable")


@dataclass(frozen=True)
class FleetKeys:
    """The politeness keys every job shares. Build with ``FleetKeys(prefix)``."""

    prefix: str

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{polite}}"

    @property
    def limits(self) -> str:
        return f"{self.base}:limits"

    @property
    def pace(self) -> str:
        return f"{self.base}:pace"

    @property
    def throttle(self) -> str:
        return f"{self.base}:throttle"

    def for_pace(self) -> list[str]:
        """The KEYS of pace.lua (a lease's first half on a Redis Cluster)."""
        return [self.pace, self.throttle]

    def for_pace_return(self) -> list[str]:
        """The KEYS of pace_return.lua (the slots a lease could not fill given back)."""
        return [self.pace, self.throttle]

    def for_throttle(self) -> list[str]:
        """The KEYS of throttle.lua."""
        return [self.throttle]


@dataclass(frozen=True)
class ProxyKeys:
    """The keys of the fleet's proxy pool, every job's (see the module docstring). Build
    with ``ProxyKeys.of(prefix)``."""

    all: str
    live: str
    cool: str
    bans: str
    gone: str
    stats: str
    refill: str

    @classmethod
    def of(cls, prefix: str) -> ProxyKeys:
        base = f"{prefix}:{{proxies}}"
        return cls(**{field.name: f"{base}:{field.name}" for field in fields(cls)})

    def for_proxy_add(self) -> list[str]:
        """The KEYS of proxy_add.lua."""
        return [self.all, self.live, self.gone]

    def for_proxy_pick(self) -> list[str]:
        """The KEYS of proxy_pick.lua."""
        return [self.all, self.live, self.cool, self.bans, self.gone]

    def for_proxy_report(self) -> list[str]:
        """The KEYS of proxy_report.lua."""
        return [self.live, self.cool, self.bans, self.gone, self.stats]


@functools.lru_cache(maxsize=65536)
def shard_tag(job: str, shard: int, shards: int) -> str:
    """The hash tag of shard *shard* of a job of *shards* shards: the job's name for
    shard 0; for shard k, ``<job>#k`` with, if needed, ``.<salt>``: the smallest salt
    that puts its slot in the N-th of the slots (slot * N // 16384) k places after
    shard 0's (modulo N). So every N-th of the slots holds one shard: masters that
    serve even ranges of slots (as a cluster is usually made) get N / masters shards
    each. Stable: the same in every process and version."""
    if shard == 0:
        return job
    target = (key_slot(job.encode()) * shards // SLOTS + shard) % shards
    for salt in range(64 * shards):
        tag = f"{job}#{shard}" if salt == 0 else f"{job}#{shard}.{salt}"
        if key_slot(tag.encode()) * shards // SLOTS == target:
            return tag
    return f"{job}#{shard}"  # not found (a chance of about e^-64): unspread


@dataclass(frozen=True)
class JobKeys:
    """Every key of one job (of shard *shard* of its *shards*). Build with
    ``JobKeys.of(prefix, job)``, a shard's with :meth:`in_shard`."""

    prefix: str
    job: str
    shard: int = 0
    shards: int = 1

    @classmethod
    def of(cls, prefix: str, job: str) -> JobKeys:
        return cls(prefix=prefix, job=job)

    def in_shard(self, shard: int, shards: int) -> JobKeys:
        """The keys of shard *shard* of the job's *shards* (0: the job's own tag)."""
        return JobKeys(self.prefix, self.job, shard, shards)

    @property
    def tag(self) -> str:
        """This shard's hash tag, braces included."""
        return "{" + shard_tag(self.job, self.shard, self.shards) + "}"

    @property
    def fleet(self) -> FleetKeys:
        """The politeness keys this job shares with every other job of its prefix."""
        return FleetKeys(self.prefix)

    @functools.cached_property
    def base(self) -> str:  # every key starts with it: worked out once per object
        return f"{self.prefix}:{self.tag}"

    @property
    def shards_key(self) -> str:
        """The job's shard count (in shard 0's slot)."""
        return f"{self.prefix}:{{{self.job}}}:shards"

    @property
    def sites(self) -> str:
        return f"{self.base}:sites"

    def queue(self, site: str) -> str:
        return f"{self.base}:q:{site}"

    def fifo(self, site: str) -> str:
        return f"{self.base}:f:{site}"

    def revisits(self, site: str) -> str:
        return f"{self.base}:v:{site}"

    def site_queues(self, site: str) -> tuple[str, str, str]:
        """The three keys a site's queued requests live in, as the scripts that take or
        return requests take them: its queue, FIFO list and revisit list."""
        return self.queue(site), self.fifo(site), self.revisits(site)

    @property
    def credit(self) -> str:
        return f"{self.base}:credit"

    @property
    def req(self) -> str:
        return f"{self.base}:req"

    @property
    def leases(self) -> str:
        return f"{self.base}:leases"

    @property
    def owner(self) -> str:
        return f"{self.base}:owner"

    @property
    def waiting(self) -> str:
        return f"{self.base}:waiting"

    @property
    def counters(self) -> str:
        return f"{self.base}:counters"

    @property
    def bad(self) -> str:
        return f"{self.base}:bad"

    @property
    def nodes(self) -> str:
        return f"{self.base}:nodes"

    @property
    def nodeinfo(self) -> str:
        return f"{self.base}:nodeinfo"

    @property
    def summaries(self) -> str:
        return f"{self.base}:summaries"

    @property
    def busy(self) -> str:
        return f"{self.base}:busy"

    @property
    def control(self) -> str:
        return f"{self.base}:control"

    @property
    def reaped(self) -> str:
        return f"{self.base}:reaped"

    @property
    def limits(self) -> str:
        return f"{self.base}:limits"

    @property
    def seen(self) -> str:
        return f"{self.base}:seen"

    @property
    def bloom(self) -> str:
        return f"{self.base}:bloom"

    def bloom_layer(self, n: int) -> str:
        return f"{self.base}:bloom:{n}"

    @property
    def feed(self) -> str:
        return f"{self.base}:feed"

    @property
    def items(self) -> str:
        return f"{self.base}:items"

    @property
    def items_dead(self) -> str:
        return f"{self.base}:items:dead"

    @property
    def changes(self) -> str:
        return f"{self.base}:changes"

    # -- each script's KEYS (see the module docstring) ------------------------------

    def _queues(self, sites: Iterable[str]) -> list[str]:
        """Each site's three queues (:meth:`site_queues`), in the order of *sites*: the
        last KEYS of the scripts that take or return requests."""
        return [key for site in sites for key in self.site_queues(site)]

    def _frontier(self) -> list[str]:
        """The first KEYS of every script that moves requests between queues, leases
        and the waiting set (commit, lease, lease_paced, requeue)."""
        return [self.sites, self.req, self.leases, self.owner, self.counters, self.waiting]

    def seen_filter(self, mode: str, layers: int = 0) -> list[str]:
        """The seen-filter's keys as its Lua library takes them: mode "exact" the set;
        mode "bloom" the meta hash, then layers 1 to *layers* (those in use and the
        spares a call may fill)."""
        if mode == "exact":
            return [self.seen]
        return [self.bloom, *(self.bloom_layer(i) for i in range(1, layers + 1))]

    def for_commit(self, seen: Sequence[str], sites: Iterable[str]) -> list[str]:
        """The KEYS of commit.lua: the seen-filter's keys *seen* (:meth:`seen_filter`),
        then the queues of *sites*, the i-th site's at its 1-based index i."""
        # new requests only: a site's queue and FIFO list (revisits are queued by requeue)
        queues = [key for site in sites for key in (self.queue(site), self.fifo(site))]
        return [*self._frontier(), self.bad, self.changes, self.feed, *seen, *queues]

    def for_lease(self, sites: Iterable[str]) -> list[str]:
        """The KEYS of lease.lua (on one Redis: the fleet's pacing keys too), with the
        queues of the offered *sites*."""
        fleet = self.fleet
        return [
            *self._frontier(),
            fleet.pace,
            fleet.throttle,
            self.credit,
            *self._queues(sites),
        ]

    def for_lease_paced(self, sites: Iterable[str]) -> list[str]:
        """The KEYS of lease_paced.lua (a lease's second half on a Redis Cluster), with
        the queues of the offered *sites*."""
        return [*self._frontier(), self.credit, *self._queues(sites)]

    def for_requeue(self, sites: Iterable[str]) -> list[str]:
        """The KEYS of requeue.lua, with the queues of *sites*, the i-th site's at its
        1-based index i."""
        return [*self._frontier(), self.nodes, self.bad, *self._queues(sites)]

    def for_expired(self) -> list[str]:
        """The KEYS of expired.lua."""
        return [
            self.leases,
            self.req,
            self.nodes,
            self.owner,
            self.reaped,
            self.counters,
            self.waiting,
        ]

    def for_heartbeat(self, *, fleet_limits: bool) -> list[str]:
        """The KEYS of heartbeat.lua; the fleet's run-time limits last if
        *fleet_limits* (on one Redis: on a cluster they are in another slot)."""
        node = [self.nodes, self.nodeinfo, self.busy, self.leases, self.owner, self.waiting]
        job = [self.counters, self.limits, self.reaped, self.control]
        return [*node, *job, *((self.fleet.limits,) if fleet_limits else ())]

    def for_control(self) -> list[str]:
        """The KEYS of control.lua."""
        return [self.control, self.counters]

    def for_join_alone(self) -> list[str]:
        """The KEYS of join_alone.lua."""
        return [self.nodes]

    def for_items_done(self) -> list[str]:
        """The KEYS of items_done.lua."""
        return [self.items, self.items_dead]

    def for_items_prune(self) -> list[str]:
        """The KEYS of items_prune.lua."""
        return [self.items]

    def fixed(self) -> list[str]:
        """Keys whose names do not depend on the job's contents (for reset)."""
        return [
            self.sites,
            self.req,
            self.leases,
            self.owner,
            self.waiting,
            self.credit,
            self.counters,
            self.bad,
            self.nodes,
            self.nodeinfo,
            self.summaries,
            self.busy,
            self.reaped,
            self.control,
            self.seen,
            self.bloom,
            self.feed,
            *((self.shards_key,) if self.shard == 0 else ()),
        ]
