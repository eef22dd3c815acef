//! Block and chain hashing: the routing keys of a prompt's text and of its token ids, and rendezvous order.
//!
//! Every hash is an 8-byte BLAKE2b digest read big-endian, so it is the same in every process.
//! Text blocks are `block_chars` characters (Unicode scalar values); block i's hash covers block
//! i-1's digest (8 zero bytes for the first) and block i's UTF-8 bytes, so "block i matches"
//! implies "the whole prefix up to i matches". Token blocks chain the same way over the ids as
//! little-endian signed 64-bit integers.

use blake2b_simd::{Params, State};

/// The parent of a prompt's first block.
pub const ROOT: [u8; 8] = [0; 8];
/// Separators of the canonical chat rendering (role, then message).
pub const ROLE_SEP: char = '\u{1e}';
pub const MSG_SEP: char = '\u{1f}';

fn state() -> State {
    Params::new().hash_length(8).to_state()
}

fn digest(state: &State) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(state.finalize().as_bytes());
    out
}

/// The digest of `parent` followed by `data`.
pub fn chained(parent: &[u8; 8], data: &[u8]) -> [u8; 8] {
    let mut s = state();
    s.update(parent);
    s.update(data);
    digest(&s)
}

/// Byte offsets of the first `count` block boundaries of `text` (`block_chars` characters each).
fn block_ends(text: &str, block_chars: usize, count: usize) -> Vec<usize> {
    if text.is_ascii() {
        return (1..=count).map(|i| i * block_chars).collect();
    }
    let mut ends = Vec::with_capacity(count);
    let mut seen = 0usize;
    for (offset, ch) in text.char_indices() {
        seen += 1;
        if seen % block_chars == 0 {
            ends.push(offset + ch.len_utf8());
            if ends.len() == count {
                break;
            }
        }
    }
    ends
}

/// Characters in `text` (bytes when it is ASCII).
pub fn char_len(text: &str) -> usize {
    if text.is_ascii() {
        text.len()
    } else {
        text.chars().count()
    }
}

/// Chained hashes of the leading full `block_chars`-sized blocks of `text` (at most `max_blocks`).
pub fn block_hashes(text: &str, block_chars: usize, max_blocks: usize) -> Vec<u64> {
    if block_chars == 0 {
        return Vec::new();
    }
    let count = (char_len(text) / block_chars).min(max_blocks);
    let mut hashes = Vec::with_capacity(count);
    let mut previous = ROOT;
    let mut start = 0usize;
    for end in block_ends(text, block_chars, count) {
        previous = chained(&previous, &text.as_bytes()[start..end]);
        hashes.push(u64::from_be_bytes(previous));
        start = end;
    }
    hashes
}

/// The router's keys of the full `block_size` blocks of `tokens`, chained from `parent`.
pub fn chain_keys(tokens: &[i64], block_size: usize, parent: [u8; 8]) -> Vec<u64> {
    if block_size == 0 {
        return Vec::new();
    }
    let mut keys = Vec::with_capacity(tokens.len() / block_size);
    let mut previous = parent;
    let mut bytes = Vec::with_capacity(block_size * 8);
    for block in tokens.chunks_exact(block_size) {
        bytes.clear();
        for token in block {
            bytes.extend_from_slice(&token.to_le_bytes());
        }
        previous = chained(&previous, &bytes);
        keys.push(u64::from_be_bytes(previous));
    }
    keys
}

/// One part of a [`stable_hash`]: text, or an integer written in decimal.
pub enum Part<'a> {
    Text(&'a str),
    Int(i128),
}

/// A 64-bit hash of the parts joined by NUL (integers in decimal), the same in every process.
pub fn stable_hash(parts: &[Part<'_>]) -> u64 {
    let mut s = state();
    for (position, part) in parts.iter().enumerate() {
        if position > 0 {
            s.update(b"\x00");
        }
        match part {
            Part::Text(text) => s.update(text.as_bytes()),
            Part::Int(value) => s.update(value.to_string().as_bytes()),
        };
    }
    u64::from_be_bytes(digest(&s))
}

/// Indexes into `names` by descending highest-random-weight score for `seed`, ties by name.
pub fn rendezvous(seed: &Part<'_>, names: &[&str]) -> Vec<usize> {
    let scores: Vec<u64> = names.iter().map(|name| stable_hash(&[clone_part(seed), Part::Text(name)])).collect();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| scores[b].cmp(&scores[a]).then_with(|| names[a].cmp(names[b])));
    order
}

fn clone_part<'a>(part: &Part<'a>) -> Part<'a> {
    match part {
        Part::Text(text) => Part::Text(text),
        Part::Int(value) => Part::Int(*value),
    }
}

/// Where the first user message of a chat rendering ends (in characters, after its separator).
///
/// None for a text that is not a chat rendering (a completion prompt) and for a first user
/// message that does not end within `head`.
pub fn anchor_end(head: &str) -> Option<usize> {
    let marker = format!("user{ROLE_SEP}");
    let start = if head.starts_with(&marker) {
        0
    } else {
        head.find(&format!("{MSG_SEP}{marker}"))?
    };
    let from = start + marker.len() + usize::from(start > 0);
    let end = head[from..].find(MSG_SEP)? + from;
    Some(char_len(&head[..end]) + 1)
}

/// A prompt head's routing key: block hashes and, for chat, the conversation anchor and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptHashes {
    pub blocks: Vec<u64>,
    pub anchor: Option<u64>,
    pub anchor_chars: usize,
}

/// The chained block hashes of `head` and its conversation anchor: the hash of the rendering through
/// the first user message, chaining the last full block before its end with the rest of it.
pub fn prompt_hashes(head: &str, block_chars: usize, max_blocks: usize) -> PromptHashes {
    let blocks = block_hashes(head, block_chars, max_blocks);
    let end = match anchor_end(head) {
        Some(end) if block_chars > 0 && end <= block_chars.saturating_mul(max_blocks) => end,
        _ => return PromptHashes { blocks, anchor: None, anchor_chars: 0 },
    };
    let whole = end / block_chars;
    let previous = if whole > 0 { blocks[whole - 1] } else { 0 };
    let tail: String = head.chars().skip(whole * block_chars).take(end - whole * block_chars).collect();
    let anchor = stable_hash(&[Part::Text("anchor"), Part::Int(previous.into()), Part::Text(&tail)]);
    PromptHashes { blocks, anchor: Some(anchor), anchor_chars: end }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_blocks_are_hashed_and_each_covers_its_predecessors() {
        let a = block_hashes("abcdefghij", 4, 10);
        assert_eq!(a.len(), 2);
        let b = block_hashes("abcdXfghij", 4, 10);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        let c = block_hashes("zbcdefgh", 4, 10);
        assert_ne!(a[1], c[1], "block 1 chains block 0");
        assert_eq!(block_hashes("abcdefghij", 4, 1).len(), 1);
    }

    #[test]
    fn the_first_block_is_blake2b_of_eight_zero_bytes_and_the_text() {
        let expected = u64::from_be_bytes(chained(&ROOT, b"abcd"));
        assert_eq!(block_hashes("abcd", 4, 1), vec![expected]);
    }

    #[test]
    fn blocks_count_characters_not_bytes() {
        let text = "ééééé";
        assert_eq!(block_hashes(text, 2, 10).len(), 2);
        assert_eq!(block_hashes(text, 2, 10)[0], u64::from_be_bytes(chained(&ROOT, "éé".as_bytes())));
    }

    #[test]
    fn chain_keys_hash_little_endian_ids_from_the_parent() {
        let keys = chain_keys(&[1, 2, 3, 4, 5], 2, ROOT);
        assert_eq!(keys.len(), 2);
        let mut first = Vec::new();
        first.extend_from_slice(&1i64.to_le_bytes());
        first.extend_from_slice(&2i64.to_le_bytes());
        assert_eq!(keys[0], u64::from_be_bytes(chained(&ROOT, &first)));
        assert_eq!(chain_keys(&[3, 4], 2, keys[0].to_be_bytes()), vec![keys[1]]);
    }

    #[test]
    fn stable_hash_joins_parts_with_nul() {
        let joined = u64::from_be_bytes(chained_plain(b"a\x0012"));
        assert_eq!(stable_hash(&[Part::Text("a"), Part::Int(12)]), joined);
    }

    fn chained_plain(data: &[u8]) -> [u8; 8] {
        let mut s = state();
        s.update(data);
        digest(&s)
    }

    #[test]
    fn rendezvous_is_a_function_of_seed_and_set_and_moves_few_on_removal() {
        let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let mut moved = 0;
        for seed in 0..400 {
            let order = rendezvous(&Part::Int(seed), &names);
            let first = names[order[0]];
            let reordered = ["h", "g", "f", "e", "d", "c", "b", "a"];
            assert_eq!(reordered[rendezvous(&Part::Int(seed), &reordered)[0]], first);
            let without: Vec<&str> = names.iter().copied().filter(|n| *n != "a").collect();
            if without[rendezvous(&Part::Int(seed), &without)[0]] != first {
                moved += 1;
            }
        }
        assert!(moved > 20 && moved < 90, "only the removed replica's seeds move ({moved} of 400)");
    }

    #[test]
    fn the_anchor_ends_after_the_first_user_message() {
        let head = format!("system{ROLE_SEP}be brief{MSG_SEP}user{ROLE_SEP}hi{MSG_SEP}assistant{ROLE_SEP}x");
        let end = anchor_end(&head).unwrap();
        assert_eq!(&head[..end], format!("system{ROLE_SEP}be brief{MSG_SEP}user{ROLE_SEP}hi{MSG_SEP}"));
        assert_eq!(anchor_end("a completion prompt"), None);
        assert_eq!(anchor_end(&format!("user{ROLE_SEP}unfinished")), None);
    }

    #[test]
    fn conversations_sharing_their_opening_share_the_anchor() {
        let first = format!("user{ROLE_SEP}hello there{MSG_SEP}");
        let later = format!("{first}assistant{ROLE_SEP}hi{MSG_SEP}user{ROLE_SEP}more{MSG_SEP}");
        let a = prompt_hashes(&first, 4, 8);
        let b = prompt_hashes(&later, 4, 8);
        assert!(a.anchor.is_some());
        assert_eq!(a.anchor, b.anchor);
        assert_eq!(a.anchor_chars, b.anchor_chars);
        assert_ne!(prompt_hashes(&format!("user{ROLE_SEP}hello thera{MSG_SEP}"), 4, 8).anchor, a.anchor);
        assert_eq!(prompt_hashes(&later, 4, 2).anchor, None, "the anchor ends beyond the hashed head");
    }
}
