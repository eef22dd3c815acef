"""The record of which parts of one partial file are on disk: what lets a resume skip them.

One JSON-lines file per partial file. Its first line says what the parts are of (the remote version's fingerprint,
the part size, the digest algorithms); each further line records one part: its index and its digests (hex), appended
as soon as the part's bytes are written. A part is fetched in one or more *spans* (pieces of it, fetched by
different connections when few bytes remain); a span is recorded after every read: its part, its offset in the part,
how many of its bytes are written, and their first-algorithm digest (a CRC), so a kill mid-span loses only the read in
progress. A kill -9 keeps both the bytes and the lines (they are in the page cache, which outlives the process); a
power loss may keep a line whose bytes never reached the disk, which is why a resume keeps a recorded part or span
only if the header matches this run and its digest, recomputed from disk, matches. A line torn by a kill is ignored;
a header that does not match empties the journal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from warmstart.preload import nofollow
from warmstart.preload.results import PreloadError


def part_count(size: int, part_size: int) -> int:
    """How many parts of `part_size` bytes cover `size` bytes (one, for an empty file)."""
    return max(1, -(-size // part_size))


def part_range(index: int, size: int, part_size: int) -> tuple[int, int]:
    """The offset and the length of part `index`."""
    offset = index * part_size
    return offset, max(0, min(part_size, size - offset))


@dataclasses.dataclass(frozen=True)
class Header:
    """What a journal's parts are of: they are reusable only by a run with the same header."""

    fingerprint: Mapping[str, Any]
    part_size: int
    algorithms: tuple[str, ...]  # digests recorded per part; the first is re-checked from disk on resume

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": dict(self.fingerprint), "partSize": self.part_size, "algorithms": list(self.algorithms)}


#: A written span of a part: its offset in the part, its length, and its digest by the header's first algorithm.
Span = tuple[int, int, str]


def _entries(lines: list[str], header: Header) -> list[dict[str, Any]]:
    """The record lines under `header` (none if the header differs), torn lines left out."""
    try:
        if not lines or json.loads(lines[0]) != header.to_json():
            return []
    except (ValueError, RecursionError):
        return []
    entries = []
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue  # torn by a kill: that part is fetched again
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def parse(lines: list[str], header: Header) -> dict[int, dict[str, str]]:
    """The parts recorded under `header` (index -> algorithm -> hex digest); nothing if the header differs."""
    count = part_count(int(header.fingerprint.get("size", 0)), header.part_size)
    parts: dict[int, dict[str, str]] = {}
    for entry in _entries(lines, header):
        index, digests = entry.get("i"), entry.get("d")
        if not (isinstance(index, int) and isinstance(digests, dict)) or "n" in entry:
            continue
        if 0 <= index < count and set(digests) == set(header.algorithms):
            parts[index] = {str(k): str(v) for k, v in digests.items()}
    return parts


def parse_spans(lines: list[str], header: Header) -> dict[int, list[Span]]:
    """The written spans recorded per part under `header` (index -> spans by offset, the longest per offset, none
    overlapping another)."""
    size = int(header.fingerprint.get("size", 0))
    longest: dict[tuple[int, int], Span] = {}
    for entry in _entries(lines, header):
        index, start, length, digest = entry.get("i"), entry.get("o", 0), entry.get("n"), entry.get("p")
        if not (isinstance(index, int) and isinstance(start, int) and isinstance(length, int)):
            continue
        if not isinstance(digest, str) or not 0 <= index < part_count(size, header.part_size):
            continue
        inside = start >= 0 and length > 0 and start + length <= part_range(index, size, header.part_size)[1]
        if inside and length > longest.get((index, start), (0, 0, ""))[1]:
            longest[index, start] = (start, length, digest)
    spans: dict[int, list[Span]] = {}
    for (index, _), span in sorted(longest.items()):
        kept = spans.setdefault(index, [])
        if not kept or span[0] >= kept[-1][0] + kept[-1][1]:
            kept.append(span)
    return spans


class PartJournal:
    """The journal of one partial file; `record` is safe to call from several download threads."""

    def __init__(self, path: str, header: Header) -> None:
        self.path, self.header = path, header
        self._lock = threading.Lock()
        self._fd = -1  # open for appends between `start` and `close`

    def _lines(self) -> list[str]:
        try:
            with os.fdopen(nofollow.open_fd(self.path, os.O_RDONLY), encoding="utf-8") as f:
                return f.read().splitlines()
        except (OSError, ValueError, PreloadError):
            return []  # none yet, unreadable, or a symlink in its place: every part is fetched

    def load(self) -> dict[int, dict[str, str]]:
        """The parts an earlier run recorded for this same header (not yet re-checked against the disk)."""
        return parse(self._lines(), self.header)

    def load_spans(self) -> dict[int, list[Span]]:
        """The written spans of parts an earlier run was still receiving (not yet re-checked)."""
        return parse_spans(self._lines(), self.header)

    def start(self, kept: Mapping[int, Mapping[str, str]], spans: Mapping[int, Sequence[Span]] | None = None) -> None:
        """Rewrite the journal with this header and the parts and spans kept (atomically: renamed into place),
        and keep it open for `record`.

        Not fsynced: a kill -9 keeps it (page cache), and after a power loss a journal lost or torn only costs the
        parts it named, which are fetched again (every kept part is re-checked against the disk anyway)."""
        tmp = self.path + ".tmp"
        lines = [json.dumps(self.header.to_json())]
        lines += [json.dumps({"i": i, "d": dict(d)}) for i, d in sorted(kept.items())]
        lines += _span_lines(spans or {})
        with os.fdopen(nofollow.open_write(tmp), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.path)
        self.close()
        self._fd = nofollow.open_fd(self.path, os.O_WRONLY | os.O_APPEND)

    def record(self, parts: Mapping[int, Mapping[str, str]], spans: Mapping[int, Sequence[Span]] | None = None) -> None:
        """Append parts and spans whose bytes are written (one write(2), not synced: see `sync`)."""
        line = "".join(json.dumps({"i": i, "d": dict(d)}) + "\n" for i, d in sorted(parts.items()))
        line += "".join(text + "\n" for text in _span_lines(spans or {}))
        if not line:
            return
        data = line.encode()
        with self._lock:
            if self._fd < 0:
                raise ValueError(f"{self.path}: recorded before start or after close")
            while data:
                data = data[os.write(self._fd, data) :]

    def sync(self) -> None:
        """fsync what was recorded (a kill -9 loses no line without it; a power loss may)."""
        with self._lock:
            fd = self._fd
        if fd >= 0:  # not under the lock: the download threads keep recording meanwhile
            os.fsync(fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def recheck(
    fd: int,
    recorded: Mapping[int, Mapping[str, str]],
    size: int,
    part_size: int,
    algorithm: str,
    digest_of: Callable[[int, int, int, str], str],
) -> dict[int, dict[str, str]]:
    """The recorded parts whose `algorithm` digest, recomputed from the file `fd`, still matches."""
    kept: dict[int, dict[str, str]] = {}
    for index, digests in recorded.items():
        offset, length = part_range(index, size, part_size)
        if digest_of(fd, offset, length, algorithm) == digests.get(algorithm):
            kept[index] = dict(digests)
    return kept


def recheck_spans(
    fd: int,
    recorded: Mapping[int, Sequence[Span]],
    size: int,
    part_size: int,
    algorithm: str,
    digest_of: Callable[[int, int, int, str], str],
) -> dict[int, list[Span]]:
    """The recorded spans whose `algorithm` digest, recomputed from the file `fd`, still matches."""
    kept: dict[int, list[Span]] = {}
    for index, spans in recorded.items():
        offset, _ = part_range(index, size, part_size)
        good = [s for s in spans if digest_of(fd, offset + s[0], s[1], algorithm) == s[2]]
        if good:
            kept[index] = good
    return kept


def _span_lines(spans: Mapping[int, Sequence[Span]]) -> list[str]:
    lines = []
    for index, of_part in sorted(spans.items()):
        for start, length, digest in of_part:
            entry: dict[str, Any] = {"i": index, "n": length, "p": digest}
            if start:
                entry["o"] = start  # left out at 0: a span from a part's start reads as before
            lines.append(json.dumps(entry))
    return lines
