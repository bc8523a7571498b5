"""Commands to a job's nodes (pause, resume, drain, stop, concurrency) and the wait for
their acknowledgements: what ``crawlfleet control`` and the manager's control endpoints
do. Commands go through Redis (:mod:`crawlfleet.frontier.control`); nodes pick them up
with their next heartbeat and acknowledge them in their status.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from redis.asyncio import Redis

from crawlfleet.exceptions import ConfigError
from crawlfleet.fleet.snapshot import job_names
from crawlfleet.frontier.control import ACTIONS, ALL_NODES, encode_command
from crawlfleet.frontier.sharded import JobFrontier
from crawlfleet.redis.keys import JobKeys

__all__ = ["COMMANDS", "Sent", "await_acks", "command_value", "send_command", "valid_node_id"]

#: What an operator can ask: the node states, and "concurrency" (with a number).
COMMANDS = (*ACTIONS, "concurrency")
POLL_SECONDS = 0.2


@dataclass
class Sent:
    """One command written for one job: its sequence number, the live nodes it
    addresses, and (after ``await_acks``) who acknowledged it and in which state."""

    job: str
    command: str
    value: str
    seq: int
    live: int
    targets: list[str]
    acked: dict[str, str] = field(default_factory=dict)  #: node -> state ("left": gone)

    @property
    def pending(self) -> list[str]:
        return [n for n in self.targets if n not in self.acked]


def command_value(command: str, value: str | int | None = None) -> tuple[str, str]:
    """(kind, encoded value) of an operator's *command*; ConfigError naming what is
    wrong (an unknown command, a concurrency that is not 1 to 10000)."""
    if command == "concurrency":
        if value is None:
            raise ConfigError("concurrency needs a number (1 to 10000)")
        return "concurrency", encode_command("concurrency", str(value))
    if command not in ACTIONS:
        raise ConfigError(f"unknown command {command!r}; expected one of {', '.join(COMMANDS)}")
    return "state", ACTIONS[command]


def valid_node_id(node: str) -> str:
    """*node* if it can name a node (no colon or whitespace), else ConfigError."""
    if not node or any(c in node for c in ": \t\r\n"):
        raise ConfigError(f"node id {node!r} is not valid (no colon or whitespace)")
    return node


async def send_command(
    client: Redis,
    prefix: str,
    job: str | None,
    command: str,
    value: str | int | None = None,
    *,
    node: str | None = None,
) -> list[Sent]:
    """Write *command* for every node of *job* (every job when None), or for one *node*
    (kept for it even when it is not alive now). UnknownJob for a job this Redis has
    never seen; [] when it has no jobs at all."""
    kind, encoded = command_value(command, value)
    if node is not None:
        valid_node_id(node)
    sent = []
    for name in await job_names(client, prefix, job):
        frontier = JobFrontier(client, JobKeys.of(prefix, name))
        live = await frontier.live_nodes()
        seq = await frontier.send_control(node or ALL_NODES, kind, encoded)
        targets = [node] if node else live
        sent.append(Sent(name, command, encoded, seq, len(live), [t for t in targets if t in live]))
    return sent


async def await_acks(client: Redis, prefix: str, sent: list[Sent], wait: float) -> None:
    """Wait at most *wait* seconds until every addressed live node reports a command
    sequence >= the one sent, or has left; fills each ``Sent.acked``."""
    deadline = time.monotonic() + max(wait, 0.0)
    while True:
        for s in sent:
            if not s.pending:
                continue
            kind = "concurrency" if s.command == "concurrency" else "state"
            statuses = await JobFrontier(client, JobKeys.of(prefix, s.job)).node_statuses()
            for node in s.pending:
                status = statuses.get(node)
                acked = status.get("control", {}).get(kind, 0) if status else 0
                if status is None or not isinstance(acked, int) or acked >= s.seq:
                    s.acked[node] = "left" if status is None else str(status.get("state", "?"))
        if all(not s.pending for s in sent) or time.monotonic() >= deadline:
            return
        await asyncio.sleep(POLL_SECONDS)
