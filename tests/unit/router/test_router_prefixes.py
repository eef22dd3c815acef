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


def test_only_the_hashed_head_is_built_and_the_key_is_the_same_as_from_the_whole_text() -> None:
    from warmstart.router.prefixes import rendered_head

    messages = [{"role": "user", "content": [{"type": "text", "text": f"part {i} " * 20} for i in range(50)]}] * 40
    body = {"messages": messages}
    whole = render_prompt("/v1/chat/completions", body)
    head, chars = rendered_head(body, 64 * 4)
    assert head == whole[: 64 * 4]
    assert chars == len(whole)
    assert prompt_key("/v1/chat/completions", body, block_chars=64, max_blocks=4).blocks == block_hashes(whole, 64, 4)


def test_millions_of_empty_messages_render_a_bounded_head() -> None:
    from warmstart.router.prefixes import rendered_head

    head, chars = rendered_head({"messages": [{}] * 1_000_000}, 1024)
    assert len(head) == 1024
    assert chars == 2 * 1_000_000  # role separator + message separator per message


def _chat(*contents: str) -> list[dict[str, str]]:
    roles = ["system", "user", "assistant", "user", "assistant", "user"]
    return [{"role": role, "content": text} for role, text in zip(roles, contents, strict=False)]


def test_every_turn_of_a_conversation_carries_its_first_turns_anchor() -> None:
    system = "rules " * 400
    turns = [_chat(system, "question one"), _chat(system, "question one", "answer " * 90, "question two")]
    keys = [prompt_key("/v1/chat/completions", {"messages": m}, block_chars=256, max_blocks=64) for m in turns]
    assert keys[0].anchor is not None and keys[0].anchor == keys[1].anchor
    assert keys[0].fresh and not keys[1].fresh
    other = prompt_key(
        "/v1/chat/completions", {"messages": _chat(system, "question ONE")}, block_chars=256, max_blocks=64
    )
    assert other.anchor != keys[0].anchor  # same system prompt, another first question: another conversation
    assert other.blocks[:5] == keys[0].blocks[:5]  # ... though they share the system prompt's blocks


def test_completions_and_a_first_user_message_beyond_the_head_have_no_anchor() -> None:
    assert prompt_key("/v1/completions", {"prompt": "x " * 600}, block_chars=256, max_blocks=8).anchor is None
    long_first = {"messages": _chat("s" * 5000, "late question")}
    assert prompt_key("/v1/chat/completions", long_first, block_chars=256, max_blocks=8).anchor is None
    assert prompt_key("/v1/chat/completions", long_first, block_chars=256, max_blocks=64).anchor is not None


def test_a_conversation_without_a_system_prompt_is_anchored_on_its_first_message() -> None:
    hello = [{"role": "user", "content": "hi"}]
    later = [*hello, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "more"}]
    first, second = (
        prompt_key("/v1/chat/completions", {"messages": m}, block_chars=256, max_blocks=8) for m in (hello, later)
    )
    assert first.anchor is not None and first.anchor == second.anchor and first.blocks == ()
