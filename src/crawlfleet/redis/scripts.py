"""Loading Lua scripts: one file per atomic operation, kept beside the code that calls
it (``crawlfleet/frontier/lua/`` for the job's frontier, ``crawlfleet/pipelines/lua/``
for the item stream, ``crawlfleet/fleet/lua/`` for what the fleet shares across jobs: the
proxy pool); a name is looked up in those folders in that order.

A script whose header says ``-- uses: seen`` is built twice, once with each seen-filter
library (``_seen_exact.lua``, ``_seen_bloom.lua``) prepended; it is then looked up as
``name`` with ``seen_mode`` "exact" or "bloom". A header ``-- uses: backoff`` prepends
``_backoff.lua`` (the decay of a site's back-off, shared by lease and throttle), and
``-- uses: entry`` prepends ``_entry.lua`` (reading a stored request's score and site),
``-- uses: counters`` prepends ``_counters.lua`` (the job's counters, robust to a value
that is not a number), ``-- uses: pace`` and ``-- uses: pop`` the two halves of a lease
(``_pace.lua``: a site's slots; ``_pop.lua``: taking its queued requests),
``-- uses: commit`` and ``-- uses: lease`` the bodies of a commit and a lease as functions
(``_commit.lua``, ``_lease.lua``: commit.lua, lease.lua and commit_lease.lua, a node's
round in one call, run them), ``-- uses: batch`` prepends ``_batch.lua`` (variadic calls
over lists of any length, and which leases of a list are still a node's), and
``-- uses: clock`` prepends ``_clock.lua`` (Redis's clock, read once per call: the only
script piece that reads TIME). Libraries shared by
scripts of several packages, such as the clock, live in ``crawlfleet/redis/lua/``,
searched last.
A script that uses ``counters`` is run wrapped: its body becomes a function, and the
reply is ``{repairs, reply}`` (``{repairs, reply, gone}`` if it uses ``entry`` too);
:class:`ScriptSet` logs each counter repaired (key, field, old and new value) and each
request dropped because its entry was gone (key, rid), and returns the script's own
reply.
Scripts are registered with redis-py, which runs them by SHA and re-sends a script the
server has forgotten (NOSCRIPT after a restart).
"""

from __future__ import annotations

import logging
from functools import cache
from importlib import resources
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from crawlfleet.redis.replies import text

__all__ = ["SEEN_MODES", "ScriptSet", "script_source"]

logger = logging.getLogger(__name__)

SEEN_MODES = ("exact", "bloom")


#: Packages whose ``lua/`` folder holds scripts and libraries, searched in this order
#: (``crawlfleet.redis``: the libraries scripts of several packages share).
SCRIPT_PACKAGES = (
    "crawlfleet.frontier",
    "crawlfleet.pipelines",
    "crawlfleet.fleet",
    "crawlfleet.redis",
)


@cache
def _read(name: str) -> str:
    """The text of Lua file *name* (read once: the installed package does not change)."""
    for package in SCRIPT_PACKAGES:
        path = resources.files(package).joinpath("lua", name)
        if path.is_file():
            return path.read_text("utf-8")
    raise FileNotFoundError(f"no Lua script {name} in {', '.join(SCRIPT_PACKAGES)}")


#: Libraries a script may name in its ``-- uses:`` header (besides "seen"), each
#: prepended in turn: one that needs another comes before it here.
LIBRARIES = ("commit", "lease", "pace", "pop", "backoff", "entry", "counters", "batch", "clock")


def _uses(body: str) -> list[str]:
    """The names of the script's ``-- uses: a, b`` header line."""
    for line in body.splitlines():
        if line.startswith("-- uses:"):
            return [u.strip() for u in line.removeprefix("-- uses:").split(",") if u.strip()]
    return []


@cache
def script_source(name: str, seen_mode: str | None = None) -> str:
    """The full source of script *name* (without ``.lua``), libraries included."""
    body = _read(f"{name}.lua")
    uses = _uses(body)
    unknown = set(uses) - {*LIBRARIES, "seen"}
    if unknown:
        raise ValueError(f"script {name} uses unknown libraries {sorted(unknown)}")
    if "counters" in uses:
        # the body's own locals and returns stay as they are, inside a function
        notes = "REPAIRS, reply, GONE" if "entry" in uses else "REPAIRS, reply"
        body = f"local function main()\n{body}\nend\nlocal reply = main()\nreturn {{{notes}}}\n"
    for library in LIBRARIES:
        if library in uses:
            body = _read(f"_{library}.lua") + "\n" + body
    if "seen" in uses:
        if seen_mode not in SEEN_MODES:
            raise ValueError(f"script {name} needs a seen mode, one of {SEEN_MODES}")
        return _read(f"_seen_{seen_mode}.lua") + "\n" + body
    return body


#: The attribute of a client that holds the scripts registered on it, by seen mode (a
#: frontier made for each request of the manager registers nothing anew). Kept on the
#: client itself: its scripts refer to it, and a cycle goes with the client, where a
#: weak-keyed table would keep every client alive.
_REGISTERED = "_crawlfleet_scripts"


@cache
def _wrapped() -> frozenset[str]:
    """The scripts of :class:`ScriptSet` whose reply comes wrapped with the counters they
    repaired."""
    return frozenset(n for n in ScriptSet.NAMES if "counters" in _uses(_read(f"{n}.lua")))


class ScriptSet:
    """The job scripts registered on one client, for one seen-filter mode."""

    NAMES = (
        "commit",
        "lease",
        "commit_lease",
        "pace",
        "lease_paced",
        "pace_return",
        "expired",
        "requeue",
        "heartbeat",
        "seen",
        "seeds_read",
        "seeds_done",
        "join_alone",
        "control",
        "throttle",
    )

    def __init__(self, client: Redis, seen_mode: str) -> None:
        by_mode: dict[str, dict[str, AsyncScript]] = vars(client).setdefault(_REGISTERED, {})
        scripts = by_mode.get(seen_mode)
        if scripts is None:
            scripts = by_mode[seen_mode] = {
                name: client.register_script(script_source(name, seen_mode)) for name in self.NAMES
            }
        self._scripts = scripts
        #: the scripts whose reply comes wrapped with the counters they repaired
        self._wrapped = _wrapped()

    async def __call__(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """The reply of script *name*; the counters it repaired are logged."""
        reply = await self._scripts[name](keys=keys, args=args)
        if name not in self._wrapped:
            return reply
        _log_repairs(reply[0])
        if len(reply) > 2:
            _log_gone(reply[2])
        return reply[1] if len(reply) > 1 else None


def _log_repairs(flat: list[Any]) -> None:
    """Log the repairs a script reports: key, field, old value, new value each."""
    for i in range(0, len(flat) - 3, 4):
        key, field, old, new = (text(v) for v in flat[i : i + 4])
        logger.warning(
            "Counter %s of %s repaired: it was %r (not a number, or below 0), it is now %s",
            field,
            key,
            old,
            new,
        )


def _log_gone(flat: list[Any]) -> None:
    """Log the requests a script dropped because their entry was gone: key, rid each."""
    for i in range(0, len(flat) - 1, 2):
        logger.warning(
            "Frontier request %s dropped: its entry in %s is gone (a hand edit or a bug)",
            text(flat[i + 1]),
            text(flat[i]),
        )
