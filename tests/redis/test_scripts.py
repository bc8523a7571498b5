"""The Lua scripts' shared pieces: Redis's clock read in one library, once a call."""

from __future__ import annotations

import re
from importlib import resources

import redis

from crawlfleet.redis.scripts import SCRIPT_PACKAGES, script_source


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
