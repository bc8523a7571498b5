"""The manager's recent callers: one state-DB lookup of a credential at a time, shared by
every request that asks while it runs; a change through the manager (``forget``) makes
the next ask look again, and a lookup that ran across it is not kept."""

from __future__ import annotations

import asyncio

import pytest

from crawlfleet.manager.callers import RecentCallers


def test_a_crowd_asking_at_once_costs_one_lookup() -> None:
    async def body() -> None:
        callers = RecentCallers(seconds=60)
        lookups: list[str] = []
        release = asyncio.Event()

        async def find() -> str | None:
            lookups.append("token")
            await release.wait()
            return "the caller"

        crowd = [asyncio.ensure_future(callers.lookup("token", "t0k", find)) for _ in range(50)]
        await asyncio.sleep(0.01)
        crowd[0].cancel()  # a client that goes away takes no one's answer with it
        release.set()
        answers = await asyncio.gather(*crowd[1:])
        assert answers == ["the caller"] * 49 and lookups == ["token"]
        assert await callers.lookup("token", "t0k", find) == "the caller"  # kept
        assert lookups == ["token"]

    asyncio.run(body())


def test_a_failed_lookup_fails_its_askers_and_the_next_ask_tries_again() -> None:
    async def body() -> None:
        callers = RecentCallers(seconds=60)
        calls = 0

        async def find() -> str | None:
            nonlocal calls
            calls += 1
            await asyncio.sleep(0.01)
            if calls == 1:
                raise OSError("state DB unreachable")
            return "the caller"

        first = [asyncio.ensure_future(callers.lookup("token", "t", find)) for _ in range(3)]
        failed = await asyncio.gather(*first, return_exceptions=True)
        assert all(isinstance(f, OSError) for f in failed) and calls == 1
        assert await callers.lookup("token", "t", find) == "the caller"
        assert calls == 2

    asyncio.run(body())


@pytest.mark.parametrize("found", ["the caller", None])
def test_a_lookup_running_across_a_change_is_not_kept(found: str | None) -> None:
    async def body() -> None:
        callers = RecentCallers(seconds=60)
        answers = iter([found, "after the change"])
        release = asyncio.Event()

        async def find() -> str | None:
            await release.wait()
            return next(answers)

        before = asyncio.ensure_future(callers.lookup("session", "s", find))
        await asyncio.sleep(0.01)
        callers.forget()  # e.g. a token revoked through the manager
        release.set()
        assert await before == found  # those who asked before the change get its answer
        assert await callers.lookup("session", "s", find) == "after the change"

    asyncio.run(body())
