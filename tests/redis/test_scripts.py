"""The Lua scripts and the key schema: Redis's clock read in one library, once a call;
each script's KEYS built by one method of the key schema, in the order (and under the
names) the script binds them at its top and lists them in its header."""

from __future__ import annotations

import gc
import re
import weakref
from importlib import resources

import redis

from crawlfleet.redis.connection import make_client
from crawlfleet.redis.keys import FleetKeys, JobKeys, ProxyKeys, SeedKeys, seed_keys
from crawlfleet.redis.scripts import SCRIPT_PACKAGES, ScriptSet, script_source

_BINDING = re.compile(
    r"^\s*local ((?:\w+_key,\s*)*\w+_key)\s*=\s*((?:KEYS\[\d+\],\s*)*KEYS\[\d+\])", re.M
)
#: Scripts whose body is a library's function (run by another script too): the file
#: that binds their KEYS.
_BODIES = {"commit": "_commit.lua", "lease": "_lease.lua"}
_HEADER = re.compile(r"(?:^-- |  )KEYS\[(\d+)\]\s+(\w+)", re.M)


def _lua_files() -> dict[str, str]:
    """File name -> text of every Lua file of every script package."""
    out: dict[str, str] = {}
    for package in SCRIPT_PACKAGES:
        folder = resources.files(package).joinpath("lua")
        if folder.is_dir():
            for path in folder.iterdir():
                if path.name.endswith(".lua"):
                    out[path.name] = path.read_text("utf-8")
    return out


def test_time_is_read_in_the_clock_library_only() -> None:
    files = _lua_files()
    assert [name for name, body in files.items() if "redis.call('TIME')" in body] == ["_clock.lua"]
    for name, body in files.items():
        if name.startswith("_"):
            continue
        if re.search(r"\bnow_(ms|us)\(", body):
            full = script_source(name.removesuffix(".lua"), "exact")
            assert "redis.call('TIME')" in full, f"{name} reads the clock without uses: clock"


def test_one_call_sees_one_instant(sync_redis: redis.Redis) -> None:
    clock = resources.files("crawlfleet.redis").joinpath("lua", "_clock.lua").read_text("utf-8")
    probe = sync_redis.register_script(
        clock
        + """
local a = now_us()
local x = 0
for i = 1, 2000000 do x = x + i end
local t = redis.call('TIME')
return {string.format('%.0f', a), string.format('%.0f', now_us()), now_ms(), t[1] * 1000000 + t[2]}
"""
    )
    first, again, ms, later = probe()
    assert int(first) == int(again)  # cached: the loop took time, now did not move
    assert int(ms) == int(first) // 1000
    assert later > int(first)  # the clock read is Redis's own, and it moves between calls


def _names(keys: JobKeys | FleetKeys | SeedKeys | ProxyKeys, prefix: str = "") -> dict[str, str]:
    """Key -> the name of the attribute of *keys* that gives it (with *prefix*)."""
    out = {}
    for attr in dir(keys):
        value = getattr(keys, attr)
        if not attr.startswith("_") and isinstance(value, str):
            out[value] = prefix + attr
    return out


def _script_keys() -> dict[str, tuple[list[str], dict[str, str]]]:
    """Script -> (its KEYS as the key schema builds them, key -> name)."""
    job = JobKeys.of("p", "j")
    fleet, seeds, proxies = job.fleet, seed_keys("s:seed"), ProxyKeys.of("p")
    of_job = _names(job) | _names(fleet, "fleet_")
    sites = ["a.test", "b.test"]
    return {
        "commit": (job.for_commit(job.seen_filter("exact"), sites), of_job),
        "lease": (job.for_lease(sites), of_job),
        # the commit's keys, then the lease's: bound by the two libraries, not by name
        "commit_lease": (
            [*job.for_commit(job.seen_filter("exact"), sites), *job.for_lease(sites)],
            of_job,
        ),
        "lease_paced": (job.for_lease_paced(sites), of_job),
        "requeue": (job.for_requeue(sites), of_job),
        "expired": (job.for_expired(), of_job),
        "heartbeat": (job.for_heartbeat(fleet_limits=True), of_job),
        "control": (job.for_control(), of_job),
        "join_alone": (job.for_join_alone(), of_job),
        "seen": (job.seen_filter("bloom", 3), of_job),
        "items_done": (job.for_items_done(), of_job),
        "items_prune": (job.for_items_prune(), of_job),
        "pace": (fleet.for_pace(), _names(fleet)),
        "pace_return": (fleet.for_pace_return(), _names(fleet)),
        "throttle": (fleet.for_throttle(), _names(fleet)),
        "seeds_read": (seeds.for_seeds_read(), _names(seeds)),
        "seeds_done": (seeds.for_seeds_done(), _names(seeds)),
        "proxy_add": (proxies.for_proxy_add(), _names(proxies)),
        "proxy_pick": (proxies.for_proxy_pick(), _names(proxies)),
        "proxy_report": (proxies.for_proxy_report(), _names(proxies)),
    }


def test_each_script_takes_its_keys_from_the_key_schema_by_name() -> None:
    cases = _script_keys()
    scripts = {n.removesuffix(".lua") for n in _lua_files() if not n.startswith("_")}
    assert scripts == set(cases), "a script without a key list in the key schema"
    for script, (keys, names) in cases.items():
        body = _lua_files()[_BODIES.get(script, f"{script}.lua")]
        bound: list[str] = []
        for left, right in _BINDING.findall(body):
            stems = [n.strip().removesuffix("_key") for n in left.split(",")]
            indexes = [int(i) for i in re.findall(r"\d+", right)]
            assert indexes == list(range(len(bound) + 1, len(bound) + 1 + len(stems))), script
            bound += stems
        header = [name for _, name in _HEADER.findall(body)]
        assert header == bound, f"{script}: its header names {header}, its code {bound}"
        assert [names[key] for key in keys[: len(bound)]] == bound, script
        # past the bindings, only the keys that vary with a call (the seen-filter's,
        # the sites' queues) are read by position
        code = [line for line in _BINDING.sub("", body).splitlines() if not line.startswith("--")]
        assert not re.search(r"KEYS\[\d+\]", "\n".join(code)), f"{script}: a key by position"


def test_a_client_registers_its_scripts_once_and_is_freed_with_them(redis_server_url: str) -> None:
    """The manager makes a frontier for each job view: on one client the scripts are
    registered once (by seen mode), and a client dropped is freed with them."""
    client = make_client(redis_server_url)
    first, again = ScriptSet(client, "exact"), ScriptSet(client, "exact")
    bloom = ScriptSet(client, "bloom")
    assert first._scripts is again._scripts and bloom._scripts is not first._scripts
    assert first._scripts["commit"].registered_client is client
    gone = weakref.ref(client)
    del client, first, again, bloom
    gc.collect()
    assert gone() is None
