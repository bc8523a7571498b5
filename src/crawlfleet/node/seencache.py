"""A node's memory of fingerprints the job's seen-filter holds.

The seen-filter only grows within a job (until a reset), so a fingerprint Redis has
answered for (this node queued it, or the filter said "seen") stays seen: a request
with it is a duplicate without asking Redis again. On real sites most links of a page
are the same navigation links as on every other page, so most of a node's requests
are such repeats.

Bounded by two generations of sets: a fingerprint goes into the new one; when that is
full the old one is forgotten and the new one becomes old. A fingerprint found in the
old generation moves to the new one, so the links a crawl keeps meeting stay. At most
*size* fingerprints are held (about 100 bytes each).

The cache belongs to one incarnation of the job, named by the *epoch* Redis gives it
(see ``commit.lua``): a node that sees another epoch (the job was reset under it)
starts over, see :class:`~crawlfleet.node.outbox.Outbox`.

What the other nodes queued comes with each commit's reply: the job's feed of the
fingerprints its commits added, read from the cache's *place* on (see
:meth:`~crawlfleet.frontier.base.Committer.commit`). Without it a node would ask Redis
once about each link another node queued; with it, a crawl's navigation links are asked
about about once in the whole fleet.
"""

from __future__ import annotations

__all__ = ["SeenCache"]


class SeenCache:
    """Fingerprints known to be in the job's seen-filter, at most *size* (0: none)."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.size = size
        self._half = max(1, size // 2)
        self._new: set[bytes] = set()
        self._old: set[bytes] = set()
        #: the job's epoch these fingerprints belong to ("": not known yet)
        self.epoch = ""
        #: the place in the job's feed of this epoch read so far (-1: no cache, no feed)
        self.place = 0 if size else -1
        #: lookups made, and how many found their fingerprint
        self.lookups = 0
        self.hits = 0

    def __contains__(self, fp: object) -> bool:
        """Whether *fp* is known to be seen (counted as a lookup, a hit when it is)."""
        if not self.size:
            return False
        self.lookups += 1
        if fp in self._new:
            self.hits += 1
            return True
        if fp in self._old:
            assert isinstance(fp, bytes)
            self._old.discard(fp)
            self._put(fp)
            self.hits += 1
            return True
        return False

    def knows(self, fp: bytes) -> bool:
        """As ``fp in cache``, with only a hit counted (a lookup and a hit): a miss is
        looked up again where it is counted."""
        if fp in self:
            return True
        if self.size:
            self.lookups -= 1
        return False

    def add(self, fp: bytes) -> None:
        """*fp* is in the seen-filter now (empty: a request that bypasses it, not kept)."""
        if self.size and fp:
            self._put(fp)

    def _put(self, fp: bytes) -> None:
        self._new.add(fp)
        if len(self._new) >= self._half:
            self._old, self._new = self._new, set()

    def clear(self, epoch: str = "") -> None:
        """Forget every fingerprint: they belonged to another epoch; *epoch* now."""
        self._new.clear()
        self._old.clear()
        self.epoch = epoch
        self.place = 0 if self.size else -1

    def fed(self, place: int, fingerprints: list[bytes]) -> None:
        """The job's feed gave *fingerprints* (of this cache's epoch), the next read
        from *place* (-1: the frontier keeps no feed)."""
        if self.size and place >= 0:
            for fp in fingerprints:
                self._put(fp)
            self.place = place

    def __len__(self) -> int:
        return len(self._new) + len(self._old)
