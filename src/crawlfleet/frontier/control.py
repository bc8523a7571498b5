"""Control commands for running nodes, delivered through Redis (nodes open no port).

An operator (``crawlfleet control``, later the manager) writes a *desired* setting into
the job's ``control`` hash, for every node of the job (scope ``*``) or for one node
(scope = its node id):

- ``state``: ``running`` (resume), ``paused``, ``draining`` or ``stopped``;
- ``concurrency``: the most requests the node runs at once (its ceiling; the feedback
  controller may run fewer).

Each write carries a job-wide sequence number. A node reads the fields of both scopes
with every heartbeat; for each kind the write with the higher number wins, so a
command for one node overrides an earlier one for the job, and the other way round.
Settings persist: a node that starts later on a paused job starts paused, until
``resume``. The node acknowledges by publishing the numbers it applied in its status
(``control``), which ``crawlfleet status`` shows.

What a node does in each state:

- ``paused``: takes nothing new, hands its unstarted leases back to the queues,
  finishes what it has started, and waits (it stays registered and keeps its
  heartbeat; the spider does not close);
- ``draining``: takes nothing new, finishes everything it holds, then closes with
  reason ``drained``;
- ``stopped``: hands back what it has not started and closes with reason ``stopped``
  (what the engine had started and could not finish goes back too);
- ``running``: back to normal.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawlfleet.exceptions import ConfigError

__all__ = [
    "ACTIONS",
    "ALL_NODES",
    "STATES",
    "Desired",
    "control_fields",
    "desired",
    "encode_command",
]

#: The scope that addresses every node of the job.
ALL_NODES = "*"
STATES = ("running", "paused", "draining", "stopped")
#: Command-line verbs and the state each one asks for.
ACTIONS = {"resume": "running", "pause": "paused", "drain": "draining", "stop": "stopped"}
KINDS = ("state", "concurrency")


@dataclass(frozen=True)
class Desired:
    """What the operator asks of one node: the newest write of each kind (0: none)."""

    state: str = "running"
    state_seq: int = 0
    concurrency: int | None = None
    concurrency_seq: int = 0


def control_fields(node: str) -> list[str]:
    """The hash fields a node reads, in the order :func:`desired` expects them."""
    return [f"{scope}:{kind}" for scope in (ALL_NODES, node) for kind in KINDS]


def encode_command(kind: str, value: str | int) -> str:
    """Validate one command's value; returns it as the script stores it."""
    if kind == "state":
        if value not in STATES:
            raise ConfigError(f"control state must be one of {', '.join(STATES)}, got {value!r}")
        return str(value)
    if kind == "concurrency":
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"concurrency must be a whole number, got {value!r}") from None
        if not 1 <= n <= 10_000:
            raise ConfigError(f"concurrency must be between 1 and 10000, got {n}")
        return str(n)
    raise ConfigError(f"unknown control kind {kind!r} (state or concurrency)")


def _parse(raw: Any) -> tuple[int, str] | None:
    """(seq, value) of a stored command; None if absent or unreadable."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        return int(doc["seq"]), str(doc["value"])
    except (ValueError, TypeError, KeyError):
        return None


def desired(values: Mapping[str, Any]) -> Desired:
    """The newest command of each kind among *values* (field -> stored JSON), as read
    for one node: fields ``*:state``, ``*:concurrency``, ``<node>:state``,
    ``<node>:concurrency``. Unreadable entries are ignored."""
    newest: dict[str, tuple[int, str]] = {}
    for field, raw in values.items():
        kind = field.rpartition(":")[2]
        parsed = _parse(raw)
        if kind in KINDS and parsed is not None and parsed > newest.get(kind, (0, "")):
            newest[kind] = parsed
    state_seq, state = newest.get("state", (0, "running"))
    conc_seq, conc = newest.get("concurrency", (0, ""))
    return Desired(
        state=state if state in STATES else "running",
        state_seq=state_seq,
        concurrency=int(conc) if conc.isdigit() and int(conc) > 0 else None,
        concurrency_seq=conc_seq,
    )
