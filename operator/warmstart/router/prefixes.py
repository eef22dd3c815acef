"""Turn a request body into the routing key: the rendered prompt's chained block hashes.

Completions hash their ``prompt``. Chat requests hash a canonical rendering of ``messages``
(role and the text of every content part, in order), so conversations that share leading
messages share leading blocks. Only full blocks are hashed, and each block's hash covers every
block before it (a chain), so "block i matches" implies "the whole prefix up to i matches".
The prompt text itself never leaves this module: callers get lengths and hashes only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

#: Separators of the canonical chat rendering; unlikely in user text, stable across versions.
_ROLE_SEP = "\x1e"
_MSG_SEP = "\x1f"


@dataclass(frozen=True, slots=True)
class PromptKey:
    """What the strategies see of a request: no text, only hashes and sizes."""

    blocks: tuple[int, ...]
    """Chained hashes of the leading full blocks (at most ``max_blocks``)."""

    chars: int
    """Length of the rendered prompt in characters."""

    session: str | None = None
    """Session key for the ``session`` strategy, if the request carries one."""


def render_prompt(path: str, body: dict[str, Any]) -> str:
    """The text whose prefix identifies the request's KV cache: prompt or canonical messages."""
    if "messages" in body and isinstance(body["messages"], list):
        return render_messages(body["messages"])
    for field in ("prompt", "inputs", "input", "text"):
        if field in body:
            return _render_prompt_value(body[field])
    return ""


def _render_prompt_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        if value and all(isinstance(item, int) for item in value):
            # token ids: a stable textual form keeps equal id prefixes equal
            return " ".join(str(item) for item in value)
        if value:
            return _render_prompt_value(value[0])  # batch: route by the first prompt
    return ""


def render_messages(messages: list[Any]) -> str:
    """Canonical rendering of chat messages; a conversation's rendering extends its prefix."""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", ""))
        parts.append(role + _ROLE_SEP + _content_text(message.get("content")) + _MSG_SEP)
    return "".join(parts)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif "type" in part:
                    texts.append(f"<{part['type']}>")
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return ""


def block_hashes(text: str, block_chars: int, max_blocks: int) -> tuple[int, ...]:
    """Chained 64-bit hashes of the leading full ``block_chars``-sized blocks of ``text``."""
    count = min(len(text) // block_chars, max_blocks)
    hashes: list[int] = []
    previous = b"\x00" * 8
    for index in range(count):
        chunk = text[index * block_chars : (index + 1) * block_chars].encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(previous + chunk, digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "big"))
        previous = digest
    return tuple(hashes)


def prompt_key(
    path: str,
    body: dict[str, Any],
    *,
    block_chars: int,
    max_blocks: int,
    session: str | None = None,
) -> PromptKey:
    """Render the request's prompt and reduce it to a :class:`PromptKey`."""
    text = render_prompt(path, body)
    return PromptKey(blocks=block_hashes(text, block_chars, max_blocks), chars=len(text), session=session)


def stable_hash(*parts: str | int) -> int:
    """A 64-bit hash that is the same in every process (unlike ``hash()``), for rendezvous."""
    data = "\x00".join(str(part) for part in parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
