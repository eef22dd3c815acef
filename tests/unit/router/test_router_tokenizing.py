"""The router tokenizes requests as vLLM does, from the model's files (a small real tokenizer built here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from warmstart.router.tokenizing import ModelTokenizer
from warmstart.sim import tinytokenizer


@pytest.fixture
def tok(tmp_path: Path) -> ModelTokenizer:
    return ModelTokenizer.from_dir(tinytokenizer.build(tmp_path))


def test_chat_is_rendered_through_the_models_template_without_added_specials(tok: ModelTokenizer) -> None:
    body = {"messages": [{"role": "system", "content": "abc def"}, {"role": "user", "content": "ghi"}]}
    text = tok.render_chat(body)
    assert text == "<s><|im_start|>system\nabc def<|im_end|>\n<|im_start|>user\nghi<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.request_tokens("/v1/chat/completions", body, 1000)
    vocab = tinytokenizer.vocabulary()
    expected = "<s> <|im_start|> system abc def <|im_end|> <|im_start|> user ghi <|im_end|> <|im_start|> assistant"
    assert ids == tuple(vocab[t] for t in expected.split())
    # content parts are joined with a newline; the generation prompt can be turned off
    parts = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "text", "text": "def"}]}]
    }
    assert "user\nabc\ndef<|im_end|>" in tok.render_chat(parts)
    assert not tok.render_chat({**parts, "add_generation_prompt": False}).endswith("assistant\n")


def test_completions_get_the_post_processors_bos_and_token_prompts_pass_through(tok: ModelTokenizer) -> None:
    vocab = tinytokenizer.vocabulary()
    assert tok.request_tokens("/v1/completions", {"prompt": "abc def"}, 1000) == (
        vocab["<s>"],
        vocab["abc"],
        vocab["def"],
    )
    assert tok.request_tokens("/v1/completions", {"prompt": [5, 6, 7]}, 2) == (5, 6)
    assert tok.request_tokens("/v1/completions", {"prompt": ["abc", "zzz"]}, 1000) == (vocab["<s>"], vocab["abc"])


def test_what_cannot_be_reproduced_is_none_never_an_error(tok: ModelTokenizer) -> None:
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    assert tok.request_tokens("/v1/chat/completions", image, 100) is None
    own_template = {"messages": [{"role": "user", "content": "abc"}], "chat_template": "{{ 1 }}"}
    assert tok.request_tokens("/v1/chat/completions", own_template, 100) is None
    assert tok.request_tokens("/v1/chat/completions", {"messages": ["not an object"]}, 100) is None
    assert tok.request_tokens("/v1/completions", {"prompt": {"a": 1}}, 100) is None
    assert tok.request_tokens("/v1/completions", {"max_tokens": 3}, 100) is None


def test_a_template_that_raises_is_none(tmp_path: Path) -> None:
    tinytokenizer.build(tmp_path)
    (tmp_path / "chat_template.jinja").write_text("{{ raise_exception('roles must alternate') }}")
    tok = ModelTokenizer.from_dir(tmp_path)
    assert tok.request_tokens("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}]}, 10) is None


def test_head_encoding_equals_the_full_encodings_prefix(tmp_path: Path) -> None:
    """A BPE whose words span several tokens: encoding a character prefix must not change the head's ids."""
    corpus = ["lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"] * 50
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    tok = ModelTokenizer.from_dir(tmp_path)
    text = " ".join(corpus) * 3
    full = tokenizer.encode(text).ids
    for limit in (1, 7, 64, 500, len(full) + 10):
        assert tok.encode(text, special_tokens=True, limit=limit) == tuple(full[:limit])


def test_piecewise_chat_encoding_equals_encoding_the_whole_rendering(tmp_path: Path) -> None:
    """Pieces between added tokens are encoded alone (and cached): the ids must be the whole text's."""
    corpus = ["lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"] * 50
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    tokenizer.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": tinytokenizer.CHAT_TEMPLATE}))
    tok = ModelTokenizer.from_dir(tmp_path)
    system = " ".join(corpus[:3])
    for turn in range(3):  # the second and third requests hit the piece cache
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": f"dolor {turn}"}]}
        text = tok.render_chat(body)
        assert tok.request_tokens("/v1/chat/completions", body, 10_000) == tuple(
            tokenizer.encode(text, add_special_tokens=False).ids
        )
        assert tok.encode_pieces(text, 5) == tuple(tokenizer.encode(text, add_special_tokens=False).ids[:5])
