//! The event-fed prefix index: which token blocks each engine reports it holds, keyed by the router's chain hash.
//!
//! `BlockStored` carries token ids: the index computes their keys from the parent's key and remembers
//! `engine hash -> key` so that `BlockRemoved` applies. A child whose parent the index does not know
//! (it missed the parent's event, or the parent cannot be keyed) is not indexed (an orphan).
//!
//! Beside the engines' truth, picks enter the index as *speculative* entries (this router's own, or a
//! peer router's): a key counts as held by a replica until `expiry`, or until that replica's events
//! confirm the key (the confirmed entry then follows the events alone, so a later removal applies).

use std::collections::HashMap;

use crate::events::{EngineHash, Event};
use crate::hashing::{chained, ROOT};
use crate::names::{longest_prefix, Id, Names};

/// Per-replica sets of block keys built from KV events, with speculative entries and a longest-prefix lookup.
#[derive(Debug)]
pub struct EventIndex {
    pub block_size: usize,
    pub names: Names,
    keys: HashMap<Id, HashMap<u64, u32>>,
    engine: HashMap<Id, HashMap<EngineHash, Option<u64>>>,
    holders: HashMap<u64, Vec<Id>>,
    /// key -> (replica, expiry); an expired entry is ignored at once and swept out later (amortized)
    speculative: HashMap<u64, Vec<(Id, f64)>>,
    /// entries speculated since the last sweep, and keys left by it: a sweep runs when the first outnumber the second
    since_sweep: usize,
    after_sweep: usize,
    /// Blocks not indexed because their parent was unknown.
    pub orphans: u64,
    /// Blocks not indexed because the engine's block size differs from the router's.
    pub mismatched: u64,
}

impl EventIndex {
    pub fn new(block_size: usize) -> Self {
        EventIndex {
            block_size,
            names: Names::default(),
            keys: HashMap::new(),
            engine: HashMap::new(),
            holders: HashMap::new(),
            speculative: HashMap::new(),
            since_sweep: 0,
            after_sweep: 0,
            orphans: 0,
            mismatched: 0,
        }
    }

    /// Apply one decoded event from `replica`.
    pub fn apply(&mut self, replica: &str, event: &Event) {
        let id = self.names.id(replica);
        match event {
            Event::BlockStored { block_hashes, parent, token_ids, block_size } => {
                self.stored(id, block_hashes, parent.as_ref(), token_ids, *block_size)
            }
            Event::Unkeyable { block_hashes } => {
                let engine = self.engine.entry(id).or_default();
                for hash in block_hashes {
                    engine.entry(hash.clone()).or_insert(None);
                }
            }
            Event::BlockRemoved { block_hashes } => {
                for hash in block_hashes {
                    let key = self.engine.get_mut(&id).and_then(|engine| engine.remove(hash)).flatten();
                    if let Some(key) = key {
                        self.drop_key(id, key);
                    }
                }
            }
            Event::AllBlocksCleared => self.clear(replica),
        }
    }

    fn stored(&mut self, id: Id, hashes: &[EngineHash], parent: Option<&EngineHash>, tokens: &[i64], size: usize) {
        let engine = self.engine.entry(id).or_default();
        if size != self.block_size {
            self.mismatched += hashes.len() as u64;
            for hash in hashes {
                engine.entry(hash.clone()).or_insert(None);
            }
            return;
        }
        let mut parent: Option<[u8; 8]> = match parent {
            None => Some(ROOT),
            Some(hash) => engine.get(hash).copied().flatten().map(u64::to_be_bytes),
        };
        let mut bytes = Vec::with_capacity(size * 8);
        for (position, hash) in hashes.iter().enumerate() {
            let Some(previous) = parent else {
                self.orphans += 1;
                self.engine.entry(id).or_default().entry(hash.clone()).or_insert(None);
                continue;
            };
            bytes.clear();
            for token in &tokens[position * size..(position + 1) * size] {
                bytes.extend_from_slice(&token.to_le_bytes());
            }
            let digest = chained(&previous, &bytes);
            parent = Some(digest);
            let key = u64::from_be_bytes(digest);
            let engine = self.engine.entry(id).or_default();
            match engine.insert(hash.clone(), Some(key)) {
                Some(Some(old)) if old == key => continue, // stored again (a duplicate event): nothing changes
                Some(Some(old)) => self.drop_key(id, old),
                _ => {}
            }
            let count = self.keys.entry(id).or_default().entry(key).or_insert(0);
            *count += 1;
            if *count == 1 {
                self.holders.entry(key).or_default().push(id);
            }
            self.confirm(key, id);
        }
    }

    /// The events now say `replica` holds `key`: its speculative entry has done its job.
    fn confirm(&mut self, key: u64, replica: Id) {
        if let Some(entries) = self.speculative.get_mut(&key) {
            entries.retain(|(id, _)| *id != replica);
            if entries.is_empty() {
                self.speculative.remove(&key);
            }
        }
    }

    fn drop_key(&mut self, replica: Id, key: u64) {
        let Some(keys) = self.keys.get_mut(&replica) else { return };
        let Some(count) = keys.get_mut(&key) else { return };
        *count -= 1;
        if *count == 0 {
            keys.remove(&key);
            if let Some(held) = self.holders.get_mut(&key) {
                held.retain(|&id| id != replica);
                if held.is_empty() {
                    self.holders.remove(&key);
                }
            }
        }
    }

    /// Forget everything `replica` reported (a restart, an unreplayable gap, a cleared cache, gone).
    pub fn clear(&mut self, replica: &str) {
        let Some(id) = self.names.get(replica) else { return };
        if let Some(keys) = self.keys.remove(&id) {
            for key in keys.keys() {
                if let Some(held) = self.holders.get_mut(key) {
                    held.retain(|&other| other != id);
                    if held.is_empty() {
                        self.holders.remove(key);
                    }
                }
            }
        }
        self.engine.remove(&id);
    }

    /// A pick sent these keys to `replica`: count them as held until `expiry` or until events confirm them.
    pub fn speculate(&mut self, replica: &str, keys: &[u64], expiry: f64) {
        let id = self.names.id(replica);
        for &key in keys {
            let entries = self.speculative.entry(key).or_default();
            match entries.iter_mut().find(|(other, _)| *other == id) {
                Some(entry) => entry.1 = expiry,
                None => entries.push((id, expiry)),
            }
        }
        self.since_sweep += keys.len();
    }

    /// Drop speculative entries whose TTL has passed (a full sweep, run when enough were added since the last:
    /// O(1) amortized per speculated key; lookups ignore expired entries meanwhile).
    pub fn expire(&mut self, now: f64) {
        if self.since_sweep <= self.after_sweep.max(1024) {
            return;
        }
        self.since_sweep = 0;
        self.speculative.retain(|_, entries| {
            entries.retain(|(_, until)| *until > now);
            !entries.is_empty()
        });
        self.after_sweep = self.speculative.len();
    }

    /// Speculative entries, expired ones not yet swept included.
    pub fn speculative_entries(&self) -> usize {
        self.speculative.values().map(Vec::len).sum()
    }

    /// Leading blocks of `keys` each of `replicas` holds, by events or by an unexpired speculative entry.
    pub fn match_ids(&mut self, keys: &[u64], replicas: &[Id], now: f64) -> Vec<(Id, usize)> {
        self.expire(now);
        let (holders, speculative) = (&self.holders, &self.speculative);
        longest_prefix(keys, replicas, |key, out| {
            if let Some(held) = holders.get(&key) {
                out.extend_from_slice(held);
            }
            if let Some(entries) = speculative.get(&key) {
                out.extend(entries.iter().filter(|(_, until)| *until > now).map(|(id, _)| *id));
            }
            !out.is_empty()
        })
    }

    /// [`EventIndex::match_ids`] by name.
    pub fn match_names(&mut self, keys: &[u64], replicas: &[&str], now: f64) -> Vec<(Id, usize)> {
        let ids: Vec<Id> = replicas.iter().map(|name| self.names.id(name)).collect();
        self.match_ids(keys, &ids, now)
    }

    /// The engine hashes of `replica`'s indexed blocks (for checks against the engine's cache).
    pub fn engine_hashes(&self, replica: &str) -> Vec<EngineHash> {
        let Some(id) = self.names.get(replica) else { return Vec::new() };
        self.engine.get(&id).map_or_else(Vec::new, |e| e.iter().filter(|(_, k)| k.is_some()).map(|(h, _)| h.clone()).collect())
    }

    /// The router keys `replica` reported holding.
    pub fn keys(&self, replica: &str) -> Vec<u64> {
        let Some(id) = self.names.get(replica) else { return Vec::new() };
        self.keys.get(&id).map_or_else(Vec::new, |keys| keys.keys().copied().collect())
    }

    /// Distinct keys `replica` reported holding.
    pub fn blocks(&self, replica: &str) -> usize {
        self.names.get(replica).and_then(|id| self.keys.get(&id)).map_or(0, HashMap::len)
    }

    /// Whether `replica` reported holding `key` (events only).
    pub fn holds(&self, replica: &str, key: u64) -> bool {
        self.names.get(replica).and_then(|id| self.keys.get(&id)).is_some_and(|keys| keys.contains_key(&key))
    }

    pub fn total_entries(&self) -> usize {
        self.keys.values().map(HashMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::chain_keys;

    fn stored(hashes: &[i128], parent: Option<i128>, tokens: &[i64], size: usize) -> Event {
        Event::BlockStored {
            block_hashes: hashes.iter().map(|&h| EngineHash::Int(h)).collect(),
            parent: parent.map(EngineHash::Int),
            token_ids: tokens.to_vec(),
            block_size: size,
        }
    }

    fn matched(index: &mut EventIndex, keys: &[u64], replicas: &[&str], now: f64) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> =
            index.match_names(keys, replicas, now).into_iter().map(|(id, d)| (index.names.name(id).to_owned(), d)).collect();
        out.sort();
        out
    }

    const TOKENS: [i64; 8] = [10, 11, 12, 13, 14, 15, 16, 17];

    #[test]
    fn stored_blocks_are_keyed_by_the_routers_chain_over_token_ids() {
        let mut index = EventIndex::new(2);
        index.apply("a", &stored(&[100, 101], None, &TOKENS[..4], 2));
        index.apply("a", &stored(&[102], Some(101), &TOKENS[4..6], 2));
        let keys = chain_keys(&TOKENS, 2, ROOT);
        assert_eq!(matched(&mut index, &keys, &["a", "b"], 0.0), vec![("a".into(), 3)]);
        index.apply("a", &Event::BlockRemoved { block_hashes: vec![EngineHash::Int(101)] });
        assert_eq!(matched(&mut index, &keys, &["a"], 0.0), vec![("a".into(), 1)]);
    }

    #[test]
    fn orphans_mismatched_sizes_and_unkeyable_parents_are_not_indexed() {
        let mut index = EventIndex::new(2);
        index.apply("a", &stored(&[1], Some(999), &TOKENS[..2], 2));
        assert_eq!(index.orphans, 1);
        index.apply("a", &stored(&[2], None, &TOKENS[..4], 4));
        assert_eq!(index.mismatched, 1);
        index.apply("a", &Event::Unkeyable { block_hashes: vec![EngineHash::Int(3)] });
        index.apply("a", &stored(&[4], Some(3), &TOKENS[2..4], 2));
        assert_eq!(index.orphans, 2);
        assert_eq!(index.total_entries(), 0);
    }

    #[test]
    fn duplicates_count_once_and_a_key_held_twice_survives_one_removal() {
        let mut index = EventIndex::new(2);
        index.apply("a", &stored(&[1], None, &TOKENS[..2], 2));
        index.apply("a", &stored(&[1], None, &TOKENS[..2], 2));
        index.apply("a", &stored(&[2], None, &TOKENS[..2], 2));
        index.apply("a", &Event::BlockRemoved { block_hashes: vec![EngineHash::Int(1)] });
        assert_eq!(index.blocks("a"), 1);
        index.apply("a", &Event::AllBlocksCleared);
        assert_eq!(index.blocks("a"), 0);
    }

    #[test]
    fn speculative_entries_last_until_their_ttl_or_a_confirming_event() {
        let mut index = EventIndex::new(2);
        let keys = chain_keys(&TOKENS[..4], 2, ROOT);
        index.speculate("peer-pick", &keys, 10.0);
        assert_eq!(matched(&mut index, &keys, &["peer-pick"], 5.0), vec![("peer-pick".into(), 2)]);
        assert!(matched(&mut index, &keys, &["peer-pick"], 10.0).is_empty(), "expired at its TTL");

        index.speculate("a", &keys, 10.0);
        index.apply("a", &stored(&[1, 2], None, &TOKENS[..4], 2));
        index.apply("a", &Event::BlockRemoved { block_hashes: vec![EngineHash::Int(2)] });
        assert_eq!(matched(&mut index, &keys, &["a"], 1.0), vec![("a".into(), 1)], "confirmed, then removed");
    }

    #[test]
    fn expired_entries_are_swept_so_memory_stays_bounded() {
        let mut index = EventIndex::new(2);
        for round in 0..100u64 {
            let keys: Vec<u64> = (round * 100..round * 100 + 100).collect();
            index.speculate("a", &keys, round as f64 + 1.0);
            index.expire(round as f64 + 0.5);
        }
        assert!(index.speculative_entries() <= 2 * 1024 + 100, "{}", index.speculative_entries());
    }

    #[test]
    fn a_renewed_speculation_outlives_its_first_expiry() {
        let mut index = EventIndex::new(2);
        let keys = chain_keys(&TOKENS[..2], 2, ROOT);
        index.speculate("a", &keys, 1.0);
        index.speculate("a", &keys, 5.0);
        assert_eq!(matched(&mut index, &keys, &["a"], 2.0), vec![("a".into(), 1)]);
    }
}
