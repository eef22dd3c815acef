"""Prompt rendering and chained block hashes: shared prefixes share leading blocks, and only those."""

from __future__ import annotations

from warmstart.router.prefixes import block_hashes, prompt_key, render_messages, render_prompt


def test_hashes_cover_only_full_blocks_up_to_the_maximum() -> None:
    assert len(block_hashes("a" * 255, 256, 10)) == 0
    assert len(block_hashes("a" * 256 * 5 + "b" * 100, 256, 10)) == 5
    assert len(block_hashes("a" * 256 * 50, 256, 10)) == 10


def test_hashes_are_chained_so_equal_blocks_after_different_prefixes_differ() -> None:
    one = block_hashes("x" * 256 + "same" * 64, 256, 8)
    two = block_hashes("y" * 256 + "same" * 64, 256, 8)
    assert one[1] != two[1]


def test_shared_prefix_shares_exactly_the_leading_blocks() -> None:
    shared = "s" * 256 * 3
    one = block_hashes(shared + "a" * 512, 256, 16)
    two = block_hashes(shared + "b" * 512, 256, 16)
    assert one[:3] == two[:3]
    assert one[3] != two[3]


def test_hashes_are_stable_across_calls() -> None:
    assert block_hashes("q" * 1000, 100, 10) == block_hashes("q" * 1000, 100, 10)


def test_chat_rendering_extends_with_each_message() -> None:
    first = [{"role": "system", "content": "rules"}, {"role": "user", "content": "hello"}]
    longer = [*first, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]
    assert render_messages(longer).startswith(render_messages(first))


def test_chat_content_parts_render_their_text() -> None:
    parts = [{"role": "user", "content": [{"type": "text", "text": "alpha"}, {"type": "image_url"}]}]
    rendered = render_messages(parts)
    assert "alpha" in rendered and "<image_url>" in rendered


def test_role_is_part_of_the_rendering() -> None:
    assert render_messages([{"role": "user", "content": "x"}]) != render_messages([{"role": "system", "content": "x"}])


def test_completion_prompt_forms() -> None:
    assert render_prompt("/v1/completions", {"prompt": "abc"}) == "abc"
    assert render_prompt("/v1/completions", {"prompt": ["first", "second"]}) == "first"
    assert render_prompt("/v1/completions", {"prompt": [1, 2, 3]}) == "1 2 3"
    assert render_prompt("/invocations", {"inputs": "xyz"}) == "xyz"
    assert render_prompt("/v1/completions", {}) == ""


def test_prompt_key_carries_no_text() -> None:
    key = prompt_key("/v1/completions", {"prompt": "secret " * 100}, block_chars=64, max_blocks=4, session="s1")
    assert key.chars == 700
    assert len(key.blocks) == 4
    assert key.session == "s1"
    assert all(isinstance(block, int) for block in key.blocks)
