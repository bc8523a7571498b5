"""Request bodies of the API (typed, validated: an unknown field is refused)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ControlBody", "LimitsBody", "NodeControlBody", "ResetBody", "SeedsBody"]

Command = Literal["pause", "resume", "drain", "stop", "concurrency"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SeedsBody(_Body):
    #: URLs or JSON seed entries, as `crawlfleet seed` takes them
    seeds: list[str] = Field(min_length=1, max_length=10_000)


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
    job: str | None = None
    wait_seconds: float = Field(default=0.0, ge=0, le=60)


class LimitsBody(_Body):
    #: site pattern ("host", "*.domain", "*") -> "H/W" (2/1s, 30/1m)
    limits: dict[str, str] = Field(min_length=1, max_length=1000)


class ResetBody(_Body):
    #: reset even while nodes are alive on the job
    force: bool = False
    #: keep the job's run-time rate limits
    keep_limits: bool = False
