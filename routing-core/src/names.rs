//! Replica names interned as small integers, so indexes keep `u32`s instead of strings.

use std::collections::HashMap;

/// A replica's interned id.
pub type Id = u32;

/// Names <-> ids; an id stays assigned to its name for the interner's life (names are few and recur).
#[derive(Default, Debug)]
pub struct Names {
    ids: HashMap<String, Id>,
    names: Vec<String>,
}

impl Names {
    /// The id of `name`, assigned on first sight.
    pub fn id(&mut self, name: &str) -> Id {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as Id;
        self.names.push(name.to_owned());
        self.ids.insert(name.to_owned(), id);
        id
    }

    /// The id of `name` if it was ever seen.
    pub fn get(&self, name: &str) -> Option<Id> {
        self.ids.get(name).copied()
    }

    pub fn name(&self, id: Id) -> &str {
        &self.names[id as usize]
    }
}

/// Whether the sorted-free small set `set` holds `id`.
pub fn holds(set: &[Id], id: Id) -> bool {
    set.contains(&id)
}

/// Leading blocks of `keys` each of `alive` holds, by `holders_of(key)`; only replicas with at least one.
///
/// Replicas drop out at the first block they lack; the walk stops when none is left.
pub fn longest_prefix<'a, F>(keys: &[u64], replicas: &[Id], mut holders_of: F) -> Vec<(Id, usize)>
where
    F: FnMut(u64, &mut Vec<Id>) -> bool + 'a,
{
    let mut matched = Vec::new();
    let mut alive: Vec<Id> = replicas.to_vec();
    let mut held: Vec<Id> = Vec::new();
    for (depth, &key) in keys.iter().enumerate() {
        held.clear();
        if !holders_of(key, &mut held) {
            held.clear();
        }
        let before = alive.len();
        let mut survivors = Vec::with_capacity(before);
        for &id in &alive {
            if holds(&held, id) {
                survivors.push(id);
            } else if depth > 0 {
                matched.push((id, depth));
            }
        }
        alive = survivors;
        if alive.is_empty() {
            return matched;
        }
    }
    matched.extend(alive.into_iter().map(|id| (id, keys.len())));
    matched
}
