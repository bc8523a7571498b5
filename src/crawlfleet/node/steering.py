"""A node's steering: its state and how many requests it runs at once, as the
operator's control commands (:mod:`crawlfleet.frontier.control`) and the feedback
controller (:mod:`crawlfleet.node.feedback`) set them. Bookkeeping only: the scheduler
acts on what changes (hands leases back, closes, resizes the downloader)."""

from __future__ import annotations

from typing import Any

from crawlfleet.frontier.control import Desired

__all__ = ["Steering"]


class Steering:
    """``ceiling``: CONCURRENT_REQUESTS, or the operator's ``concurrency`` command;
    ``feedback_limit``: what the feedback controller allows (None: no controller). The
    node runs the lower of the two, and keeps a prefetch buffer in proportion."""

    def __init__(self, concurrency: int, prefetch: int) -> None:
        self.configured = max(1, concurrency)
        self.configured_prefetch = max(1, prefetch)
        self.ceiling = self.configured
        self.feedback_limit: int | None = None
        #: "running", "paused", "draining" or "stopped"
        self.state = "running"
        #: the newest commands applied
        self.control = Desired()

    @property
    def concurrency(self) -> int:
        """Requests the node runs at once now."""
        if self.feedback_limit is None:
            return self.ceiling
        return max(1, min(self.ceiling, self.feedback_limit))

    @property
    def prefetch(self) -> int:
        """Leased requests kept ready: the configured prefetch, scaled with the
        concurrency (a node never holds more than it can start soon)."""
        return max(1, round(self.configured_prefetch * self.concurrency / self.configured))

    def take(self, wanted: Desired) -> tuple[bool, str | None]:
        """Apply the operator's newest commands; returns whether the ceiling changed,
        and the new state (None when the state stays)."""
        if wanted == self.control:
            return False, None
        previous, self.control = self.control, wanted
        resized = wanted.concurrency_seq != previous.concurrency_seq
        if resized:
            self.ceiling = wanted.concurrency or self.configured
        if wanted.state == self.state:
            return resized, None
        self.state = wanted.state
        return resized, self.state

    def set_feedback(self, limit: int | None) -> bool:
        """The feedback controller's limit; whether it changed."""
        changed = limit != self.feedback_limit
        self.feedback_limit = limit
        return changed

    def status(self) -> dict[str, Any]:
        """The node-status fields of the steering."""
        return {
            "state": self.state,
            "control": {
                "state": self.control.state_seq,
                "concurrency": self.control.concurrency_seq,
            },
            "concurrency": self.concurrency,
            "concurrency_ceiling": self.ceiling,
            "prefetch": self.prefetch,
        }
