"""Which byte range a download thread fetches next: the missing ranges of every file, cut into pieces that shrink
as the download nears its end, so that every connection stays busy until the last byte.

The missing ranges (gaps) are taken in order: file by file, largest file first, part by part. A piece is at most the
file's piece size, and at most the bytes not yet handed out divided by the connections (guided self-scheduling):
while much remains, pieces are whole; near the end they shrink to `MIN_PIECE`, so the last connections finish
together instead of one part at one connection's speed. A resume's gaps (the parts and spans its journal lacks) go
through the same schedule as a clean run's whole parts. A piece never crosses a part: digests are per part.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterable

#: The smallest piece handed out (the last pieces of a download), but for a gap's own remainder.
MIN_PIECE = 2 << 20


@dataclasses.dataclass(frozen=True)
class Piece:
    """A range to fetch: `length` bytes at `start` of part `part` of file `job`."""

    job: int
    part: int
    start: int
    length: int


@dataclasses.dataclass
class Gap:
    """Bytes [start, end) of part `part` of file `job` are missing; pieces of it are at most `cap` bytes."""

    job: int
    part: int
    start: int
    end: int
    cap: int


def gaps(job: int, part: int, length: int, have: Iterable[tuple[int, int]], cap: int) -> list[Gap]:
    """The ranges of a part of `length` bytes not covered by `have` ((start, length) spans, sorted, disjoint)."""
    found, at = [], 0
    for start, size in have:
        if start > at:
            found.append(Gap(job, part, at, start, cap))
        at = max(at, start + size)
    if at < length:
        found.append(Gap(job, part, at, length, cap))
    return found


class Schedule:
    """Hands out pieces of the gaps to `concurrency` threads (thread-safe)."""

    def __init__(self, missing: Iterable[Gap], concurrency: int, min_piece: int = MIN_PIECE) -> None:
        self._gaps = collections.deque(g for g in missing if g.end > g.start)
        self._left = sum(g.end - g.start for g in self._gaps)
        self._concurrency, self._min = max(1, concurrency), min_piece
        self._lock = threading.Lock()

    @property
    def left(self) -> int:
        """Bytes not yet handed out."""
        return self._left

    def take(self) -> Piece | None:
        """The next piece, or None when every byte is handed out."""
        with self._lock:
            if not self._gaps:
                return None
            gap = self._gaps[0]
            rest = gap.end - gap.start
            share = -(-self._left // self._concurrency)
            size = min(rest, gap.cap, max(self._min, share))
            if 0 < rest - size < self._min and rest <= gap.cap:
                size = rest  # no sliver left behind for a request of its own
            piece = Piece(gap.job, gap.part, gap.start, size)
            gap.start += size
            self._left -= size
            if gap.start == gap.end:
                self._gaps.popleft()
            return piece
