//! The approximate prefix index: which block hashes each replica probably holds, from what the router sent where.
//!
//! Each replica's entry is an LRU of block hashes bounded by `capacity_blocks`, so the index forgets
//! roughly when the engine evicts and memory stays at about `replicas x capacity_blocks` entries. A
//! reverse map (block -> replicas) makes a lookup cost O(matched blocks), not O(replicas x blocks).

use std::collections::{BTreeMap, HashMap};

use crate::names::{longest_prefix, Id, Names};

#[derive(Default, Debug)]
struct Lru {
    /// block -> (sequence number of first insertion, recency tick)
    entries: HashMap<u64, (u64, u64)>,
    /// recency tick -> block, oldest first
    order: BTreeMap<u64, u64>,
}

/// Per-replica LRU sets of chained block hashes, with a longest-prefix lookup.
#[derive(Debug)]
pub struct TextIndex {
    pub capacity_blocks: usize,
    pub names: Names,
    lru: HashMap<Id, Lru>,
    holders: HashMap<u64, Vec<Id>>,
    sequence: u64,
    tick: u64,
}

impl TextIndex {
    pub fn new(capacity_blocks: usize) -> Self {
        TextIndex { capacity_blocks, names: Names::default(), lru: HashMap::new(), holders: HashMap::new(), sequence: 0, tick: 0 }
    }

    /// Number of leading blocks each of `replicas` holds (only those with at least one).
    pub fn match_ids(&self, blocks: &[u64], replicas: &[Id]) -> Vec<(Id, usize)> {
        if blocks.is_empty() {
            return Vec::new();
        }
        longest_prefix(blocks, replicas, |key, out| match self.holders.get(&key) {
            Some(held) => {
                out.extend_from_slice(held);
                true
            }
            None => false,
        })
    }

    /// [`TextIndex::match_ids`] by name.
    pub fn match_names(&mut self, blocks: &[u64], replicas: &[&str]) -> Vec<(Id, usize)> {
        let ids: Vec<Id> = replicas.iter().map(|name| self.names.id(name)).collect();
        self.match_ids(blocks, &ids)
    }

    /// `replica` now holds `blocks` (most recently used), evicting its least recently used ones.
    pub fn record(&mut self, replica: &str, blocks: &[u64]) {
        let id = self.names.id(replica);
        let lru = self.lru.entry(id).or_default();
        for &block in blocks {
            self.tick += 1;
            match lru.entries.get_mut(&block) {
                Some(entry) => {
                    lru.order.remove(&entry.1);
                    entry.1 = self.tick;
                }
                None => {
                    self.sequence += 1;
                    lru.entries.insert(block, (self.sequence, self.tick));
                    let held = self.holders.entry(block).or_default();
                    if !held.contains(&id) {
                        held.push(id);
                    }
                }
            }
            lru.order.insert(self.tick, block);
        }
        while lru.entries.len() > self.capacity_blocks {
            let Some((_, evicted)) = lru.order.pop_first() else { break };
            lru.entries.remove(&evicted);
            drop_holder(&mut self.holders, evicted, id);
        }
    }

    /// The replicas that hold `block`.
    pub fn holders(&self, block: u64) -> Vec<Id> {
        self.holders.get(&block).cloned().unwrap_or_default()
    }

    /// When `replica` first got `block` (a sequence number; smaller = earlier; 0 = never).
    pub fn since(&self, replica: Id, block: u64) -> u64 {
        self.lru.get(&replica).and_then(|lru| lru.entries.get(&block)).map_or(0, |entry| entry.0)
    }

    /// Drop everything known about `replica` (it left the fleet).
    pub fn forget(&mut self, replica: &str) {
        let Some(id) = self.names.get(replica) else { return };
        if let Some(lru) = self.lru.remove(&id) {
            for block in lru.entries.keys() {
                drop_holder(&mut self.holders, *block, id);
            }
        }
    }

    /// Replicas that have an entry, by name.
    pub fn replicas(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lru.keys().map(|&id| self.names.name(id).to_owned()).collect();
        names.sort();
        names
    }

    /// Blocks the index holds for `replica`.
    pub fn blocks(&self, replica: &str) -> usize {
        self.names.get(replica).and_then(|id| self.lru.get(&id)).map_or(0, |lru| lru.entries.len())
    }

    /// Entries across all replicas: the index's memory is proportional to this.
    pub fn total_entries(&self) -> usize {
        self.lru.values().map(|lru| lru.entries.len()).sum()
    }
}

fn drop_holder(holders: &mut HashMap<u64, Vec<Id>>, block: u64, replica: Id) {
    if let Some(held) = holders.get_mut(&block) {
        held.retain(|&id| id != replica);
        if held.is_empty() {
            holders.remove(&block);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_name(index: &mut TextIndex, blocks: &[u64], replicas: &[&str]) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = index
            .match_names(blocks, replicas)
            .into_iter()
            .map(|(id, depth)| (index.names.name(id).to_owned(), depth))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_replica_matches_the_leading_blocks_it_holds() {
        let mut index = TextIndex::new(100);
        index.record("a", &[1, 2, 3]);
        index.record("b", &[1, 9]);
        assert_eq!(by_name(&mut index, &[1, 2, 3, 4], &["a", "b", "c"]), vec![("a".into(), 3), ("b".into(), 1)]);
        assert_eq!(by_name(&mut index, &[2, 3], &["a"]), vec![("a".into(), 2)]);
        assert!(by_name(&mut index, &[7], &["a", "b"]).is_empty());
        assert!(by_name(&mut index, &[1, 2], &["c"]).is_empty(), "only the replicas asked about");
    }

    #[test]
    fn the_least_recently_used_blocks_go_first_at_capacity() {
        let mut index = TextIndex::new(3);
        index.record("a", &[1, 2, 3]);
        index.record("a", &[1]);
        index.record("a", &[4]);
        assert_eq!(index.blocks("a"), 3);
        assert!(index.holders(2).is_empty(), "block 2 was the least recently used");
        assert_eq!(index.holders(1).len(), 1);
    }

    #[test]
    fn since_keeps_the_first_insertion_and_forget_drops_everything() {
        let mut index = TextIndex::new(10);
        index.record("a", &[5]);
        index.record("b", &[5]);
        index.record("a", &[5]);
        let a = index.names.get("a").unwrap();
        let b = index.names.get("b").unwrap();
        assert!(index.since(a, 5) < index.since(b, 5));
        index.forget("a");
        assert_eq!(index.since(a, 5), 0);
        assert_eq!(index.holders(5), vec![b]);
        assert_eq!(index.total_entries(), 1);
        assert_eq!(index.replicas(), vec!["b".to_string()]);
    }
}
