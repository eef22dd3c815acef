"""Turn a request into the token ids the engine computes for it, from the model's own tokenizer files.

An engine's KV-cache events carry token ids, so a router that follows them must key each request by
the same ids. This module reproduces what vLLM's OpenAI server does:

* ``/v1/completions`` (and ``/invocations``): ``prompt`` encoded with the tokenizer's special tokens
  (its post-processor adds BOS where the model wants it); a prompt that is already a list of token
  ids is taken as it is; a batch is keyed by its first prompt.
* ``/v1/chat/completions``: ``messages`` rendered through the model's chat template with Jinja2 the
  way transformers' ``apply_chat_template`` does (a sandboxed environment with ``trim_blocks`` and
  ``lstrip_blocks``, ``raise_exception``, ``tojson``, ``bos_token``/``eos_token``,
  ``add_generation_prompt`` true unless ``continue_final_message``), then encoded *without* special
  tokens (the template writes them). Text content parts are joined with a newline.

Files: ``tokenizer.json`` (Hugging Face ``tokenizers``) and ``tokenizer_config.json`` (chat template,
special tokens), or a ``chat_template.jinja`` beside them. Anything this module cannot reproduce
exactly (images, a template the request brings, a template error) gives ``None``: the router then
routes by the request's text instead, and never fails the request.

Only the head of a prompt matters (``limit`` tokens), so long prompts are encoded by growing
prefixes: a character cut changes at most the last pre-token, and those last tokens are dropped.

Chat renderings are encoded piece by piece: ``tokenizers`` splits its input on added tokens first and
encodes the text between them independently, so the ids of a rendering are the ids of its pieces
in order. Pieces repeat across requests (a system prompt, a conversation's earlier turns), and an
LRU of their ids makes a repeated piece cost a dictionary lookup. The cache is used only when no
added token strips or matches whole words (flags that change the neighbouring text).
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

log = logging.getLogger(__name__)

#: Tokens dropped at the end of an encoded character prefix (the cut may split a word's tokens).
_CUT_MARGIN = 8
#: First character prefix tried, per token wanted.
_CHARS_PER_TOKEN_GUESS = 6
#: Pieces of chat renderings whose ids are kept, their characters in all, and the shortest piece worth keeping.
_PIECES = 4096
_PIECE_CHARS = 8 << 20
_PIECE_MIN_CHARS = 64


class TemplateError(ValueError):
    """The chat template cannot render this request (it called ``raise_exception`` or failed)."""


def _raise(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, indent: int | None = None) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _special(value: Any) -> str | None:
    """``bos_token`` in tokenizer_config.json is a string or an AddedToken-like mapping."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class ModelTokenizer:
    """A model's tokenizer and chat template, loaded once from its files."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str | None, special: dict[str, str | None]) -> None:
        self.tokenizer = tokenizer
        self.special = special
        self._pieces: OrderedDict[str, tuple[tuple[int, ...], bool]] = OrderedDict()  # piece -> (ids, whole)
        self._piece_chars = 0
        added = tokenizer.get_added_tokens_decoder()
        plain = all(not (a.lstrip or a.rstrip or a.single_word) for a in added.values())
        self._added = {a.content: i for i, a in added.items()}
        self._split = (
            re.compile("(" + "|".join(re.escape(c) for c in sorted(self._added, key=len, reverse=True)) + ")")
            if plain and self._added
            else None
        )
        self._template: jinja2.Template | None = None
        if chat_template is not None:
            env = ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
            )
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = _strftime_now
            self._template = env.from_string(chat_template)

    @classmethod
    def from_dir(cls, directory: str | Path) -> ModelTokenizer:
        """Load ``tokenizer.json`` and, when present, ``tokenizer_config.json`` / ``chat_template.jinja``."""
        root = Path(directory)
        tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        config: dict[str, Any] = {}
        config_path = root / "tokenizer_config.json"
        if config_path.is_file():
            loaded = json.loads(config_path.read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
        template = config.get("chat_template")
        if isinstance(template, list):  # named templates: the "default" one
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        jinja_path = root / "chat_template.jinja"
        if jinja_path.is_file():
            template = jinja_path.read_text(encoding="utf-8")
        special = {key: _special(config.get(key)) for key in ("bos_token", "eos_token", "unk_token", "pad_token")}
        return cls(tokenizer, template if isinstance(template, str) else None, special)

    def render_chat(self, body: dict[str, Any]) -> str:
        """The chat template's rendering of ``body['messages']`` (TemplateError when it cannot)."""
        if self._template is None:
            raise TemplateError("the model has no chat template")
        messages = [_message(m) for m in body.get("messages") or []]
        continue_final = bool(body.get("continue_final_message", False))
        add_generation = bool(body.get("add_generation_prompt", not continue_final))
        kwargs = body.get("chat_template_kwargs")
        context: dict[str, Any] = dict(kwargs) if isinstance(kwargs, dict) else {}
        context.update(
            messages=messages,
            add_generation_prompt=add_generation,
            tools=body.get("tools"),
            documents=body.get("documents"),
            **{k: v for k, v in self.special.items() if v is not None},
        )
        try:
            text = self._template.render(**context)
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - any template failure means "route by text"
            raise TemplateError(f"chat template failed: {type(exc).__name__}") from None
        if continue_final and messages:
            # vLLM cuts the rendering after the final message's content (no end-of-turn tokens)
            last = messages[-1].get("content")
            if isinstance(last, str) and last:
                end = text.rfind(last)
                if end >= 0:
                    text = text[: end + len(last)]
        return text

    def encode(self, text: str, *, special_tokens: bool, limit: int) -> tuple[int, ...]:
        """The first ``limit`` token ids of ``text`` (exact: encoded over growing prefixes)."""
        chars = max(64, limit * _CHARS_PER_TOKEN_GUESS)
        while True:
            if chars >= len(text):
                return tuple(self.tokenizer.encode(text, add_special_tokens=special_tokens).ids[:limit])
            ids = self.tokenizer.encode(text[:chars], add_special_tokens=special_tokens).ids
            if len(ids) >= limit + _CUT_MARGIN:
                return tuple(ids[:limit])
            chars *= 2

    def encode_pieces(self, text: str, limit: int) -> tuple[int, ...]:
        """The first ``limit`` ids of ``text`` without added specials, piece by piece (see module doc)."""
        if self._split is None:
            return self.encode(text, special_tokens=False, limit=limit)
        ids: list[int] = []
        for position, piece in enumerate(self._split.split(text)):
            if len(ids) >= limit:
                break
            if not piece:
                continue
            if position % 2:  # an added token
                ids.append(self._added[piece])
                continue
            wanted = limit - len(ids)
            cached = self._pieces.get(piece) if len(piece) >= _PIECE_MIN_CHARS else None
            if cached is None or (not cached[1] and len(cached[0]) < wanted):
                # only the head is encoded: a long piece costs what the routing key needs, not its length
                head = self.encode(piece, special_tokens=False, limit=wanted + 1)
                cached = (head[:wanted], len(head) <= wanted)
                self._remember(piece, cached)
            else:
                self._pieces.move_to_end(piece)
            ids.extend(cached[0])
        return tuple(ids[:limit])

    def _remember(self, piece: str, entry: tuple[tuple[int, ...], bool]) -> None:
        if len(piece) < _PIECE_MIN_CHARS or len(piece) > _PIECE_CHARS // 4:
            return
        if self._pieces.pop(piece, None) is not None:
            self._piece_chars -= len(piece)
        self._pieces[piece] = entry
        self._piece_chars += len(piece)
        while len(self._pieces) > _PIECES or self._piece_chars > _PIECE_CHARS:
            evicted, _ = self._pieces.popitem(last=False)
            self._piece_chars -= len(evicted)

    def request_tokens(self, path: str, body: dict[str, Any], limit: int) -> tuple[int, ...] | None:
        """The first ``limit`` token ids the engine computes for this request, or None if unknown."""
        try:
            if isinstance(body.get("messages"), list):
                if "chat_template" in body:
                    return None  # a template of the request's own: not the model's
                return self.encode_pieces(self.render_chat(body), limit)
            for field in ("prompt", "inputs"):
                if field in body:
                    return self._prompt_tokens(body[field], limit)
        except (TemplateError, TypeError, ValueError) as exc:
            log.debug("routing by text: cannot tokenize (%s)", type(exc).__name__)
        return None

    def _prompt_tokens(self, prompt: Any, limit: int) -> tuple[int, ...] | None:
        if isinstance(prompt, str):
            return self.encode(prompt, special_tokens=True, limit=limit)
        if isinstance(prompt, list) and prompt:
            if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
                return tuple(prompt[:limit])
            return self._prompt_tokens(prompt[0], limit)  # a batch: keyed by its first prompt
        return None


def _message(message: Any) -> dict[str, Any]:
    """A message as the template sees it: text parts joined by newlines (vLLM's "string" format)."""
    if not isinstance(message, dict):
        raise TemplateError("a message is not an object")
    content = message.get("content")
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise TemplateError("non-text content")
        return {**message, "content": "\n".join(texts)}
    return dict(message)
