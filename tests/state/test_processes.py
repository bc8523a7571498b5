"""Processes started through Scrapyd, in the state DB: what the manager's watch sees
from Scrapyd never overwrites an end recorded meanwhile (a cancel racing the watch)."""

from __future__ import annotations

from crawlfleet.state.db import StateDB
from crawlfleet.state.scrapyd import get_process, record_process, set_process_state


def test_the_watch_moves_active_processes_only(state_db: StateDB) -> None:
    pid = record_process(state_db, "j", "box", "proj", "site", "sid-1", "alice")
    set_process_state(state_db, pid, "running", if_active=True)
    assert (get_process(state_db, "j", pid) or {})["state"] == "running"
    # a cancel ends it (its note says how); the watch, which read "running" a moment
    # before, then reports what Scrapyd says of the ended process
    set_process_state(state_db, pid, "cancelled", "stopped on TERM")
    set_process_state(state_db, pid, "finished", if_active=True)
    set_process_state(state_db, pid, "lost", "Scrapyd no longer knows it", if_active=True)
    after = get_process(state_db, "j", pid) or {}
    assert (after["state"], after["note"]) == ("cancelled", "stopped on TERM")
    assert after["finished_at"] is not None
