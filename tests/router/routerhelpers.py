"""Helpers shared by the proxy tests (SSE parsing)."""

from __future__ import annotations


def sse_events(raw: bytes) -> list[str]:
    """The data payloads of an SSE body, in order."""
    events = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                events.append(line[len("data: ") :])
    return events
