"""Turn a request body into the routing key: the rendered prompt's chained block hashes.

Completions hash their ``prompt``. Chat requests hash a canonical rendering of ``messages``
(role and the text of every content part, in order), so conversations that share leading
messages share leading blocks. Only full blocks are hashed, and each block's hash covers every
block before it (a chain), so "block i matches" implies "the whole prefix up to i matches".
The prompt text itself never leaves this module: callers get lengths and hashes only. The
hashing itself is the routing core's (:mod:`warmstart._routing_core`); this module renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warmstart import _routing_core as core

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

    anchor: int | None = None
    """A chat conversation's identity: the hash of its rendering through the first user message
    (the leading messages every later turn repeats); None for completions, or when the first user
    message ends beyond the hashed head."""

    anchor_chars: int = 0
    """Where the anchor ends in the rendering (characters); the prompt continues the conversation
    past its first user message when ``chars`` is larger."""

    token_blocks: tuple[int, ...] | None = None
    """The router's keys of the request's token-id blocks (:func:`warmstart._routing_core.chain_keys`), when the
    router follows the engines' KV events and could tokenize the request; None otherwise."""

    @property
    def fresh(self) -> bool:
        """The first turn of a conversation: nothing follows the anchor."""
        return self.anchor is not None and self.chars <= self.anchor_chars


class _Head:
    """The first ``limit`` characters of a rendering, and the length of all of it (bounded memory)."""

    __slots__ = ("chars", "kept", "limit", "parts")

    def __init__(self, limit: int | None) -> None:
        self.parts: list[str] = []
        self.kept = self.chars = 0
        self.limit = limit

    def add(self, text: str) -> None:
        self.chars += len(text)
        if self.limit is None:
            self.parts.append(text)
        elif self.kept < self.limit:
            piece = text[: self.limit - self.kept]
            self.parts.append(piece)
            self.kept += len(piece)

    def text(self) -> str:
        return "".join(self.parts)


def rendered_head(body: dict[str, Any], limit: int | None) -> tuple[str, int]:
    """The first ``limit`` characters of the rendered prompt and its full length.

    Only the head is built, however many messages or content parts the body holds, so a hostile
    body of millions of messages costs a walk over them but no structure of their size.
    """
    head = _Head(limit)
    if "messages" in body and isinstance(body["messages"], list):
        _render_messages(body["messages"], head)
    else:
        for field in ("prompt", "inputs", "input", "text"):
            if field in body:
                _render_prompt_value(body[field], head)
                break
    return head.text(), head.chars


def render_prompt(path: str, body: dict[str, Any]) -> str:
    """The text whose prefix identifies the request's KV cache: prompt or canonical messages."""
    return rendered_head(body, None)[0]


def _render_prompt_value(value: Any, head: _Head) -> None:
    if isinstance(value, str):
        head.add(value)
    elif isinstance(value, list) and value:
        if all(isinstance(item, int) for item in value):
            # token ids: a stable textual form keeps equal id prefixes equal
            for position, item in enumerate(value):
                head.add(f" {item}" if position else str(item))
        else:
            _render_prompt_value(value[0], head)  # batch: route by the first prompt


def render_messages(messages: list[Any]) -> str:
    """Canonical rendering of chat messages; a conversation's rendering extends its prefix."""
    head = _Head(None)
    _render_messages(messages, head)
    return head.text()


def _render_messages(messages: list[Any], head: _Head) -> None:
    for message in messages:
        if not isinstance(message, dict):
            continue
        head.add(str(message.get("role", "")) + _ROLE_SEP)
        _content_text(message.get("content"), head)
        head.add(_MSG_SEP)


def _content_text(content: Any, head: _Head) -> None:
    if isinstance(content, str):
        head.add(content)
    elif isinstance(content, list):
        first = True
        for part in content:
            if isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    text = part["text"]
                elif "type" in part:
                    text = f"<{part['type']}>"
                else:
                    continue
            elif isinstance(part, str):
                text = part
            else:
                continue
            if not first:
                head.add("\n")
            head.add(text)
            first = False


def block_hashes(text: str, block_chars: int, max_blocks: int) -> tuple[int, ...]:
    """Chained 64-bit hashes of the leading full ``block_chars``-sized blocks of ``text``.

    Block i's hash is the 8-byte BLAKE2b digest of (block i-1's digest, or 8 zero bytes) followed
    by block i's UTF-8 bytes.
    """
    return tuple(core.block_hashes(text, block_chars, max_blocks))


def key_of(head: str, chars: int, *, block_chars: int, max_blocks: int, session: str | None = None) -> PromptKey:
    """The :class:`PromptKey` of a rendered prompt's head (its first ``block_chars x max_blocks``
    characters) and its full length: chained block hashes, and for chat the conversation anchor (the
    hash of the rendering through the first user message, chaining the last full block before its end
    with the rest of it)."""
    blocks, anchor, anchor_chars = core.prompt_hashes(head, block_chars, max_blocks)
    return PromptKey(blocks=tuple(blocks), chars=chars, session=session, anchor=anchor, anchor_chars=anchor_chars)


def prompt_key(
    path: str,
    body: dict[str, Any],
    *,
    block_chars: int,
    max_blocks: int,
    session: str | None = None,
) -> PromptKey:
    """Render the request's prompt and reduce it to a :class:`PromptKey`."""
    text, chars = rendered_head(body, block_chars * max_blocks)
    return key_of(text, chars, block_chars=block_chars, max_blocks=max_blocks, session=session)


def stable_hash(*parts: str | int) -> int:
    """A 64-bit hash that is the same in every process (unlike ``hash()``), for rendezvous."""
    return core.stable_hash(*parts)
