"""Write a small, real Hugging Face tokenizer for the sim's workloads (tests, the demo and the benchmarks).

The sim's workloads are random three-letter words, each followed by a space; this tokenizer has
one token per such word (a ``WordLevel`` model over all 17,576 of them, whitespace pre-tokenized),
so prompts cost the same tokens as under the sim's built-in 4-characters-per-token model. It also
has the usual special tokens, a BOS added to completions by its post-processor, and a ChatML chat
template in ``tokenizer_config.json``: everything a router must reproduce to key requests as the
engine does. Built locally in milliseconds; nothing is fetched.
"""

from __future__ import annotations

import itertools
import json
import string
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, processors

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
SPECIAL = (UNK, BOS, EOS, "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_EXTRA_WORDS = ("system", "user", "assistant", "tool", "question", "document")


def vocabulary() -> dict[str, int]:
    """Special tokens, single characters, role words, then every three-letter lowercase word."""
    words = list(SPECIAL)
    words += list(string.ascii_letters + string.digits + string.punctuation)
    words += list(_EXTRA_WORDS)
    words += ["".join(letters) for letters in itertools.product(string.ascii_lowercase, repeat=3)]
    return {word: index for index, word in enumerate(dict.fromkeys(words))}


def build(directory: str | Path) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``; return it."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    vocab = vocabulary()
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(list(SPECIAL))
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    tokenizer.save(str(root / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "chat_template": CHAT_TEMPLATE}
    (root / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return root
