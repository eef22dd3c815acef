//! The pick: longest cached prefix under the bounded-load rules, rendezvous order for ties and spills.
//!
//! Two pickers share the rules. [`prefix_pick`] places by the router's own text index and request
//! shares (the `prefixaware` strategy, conversations by their anchor); [`engine_pick`] places by the
//! engines' KV events and reported load (`kvEvents`). docs/router.md states the rules; the
//! comments here name which one each step applies.

use std::cmp::Ordering;

use crate::hashing::{rendezvous, Part};
use crate::loads::{load_ceiling, share_bound};
use crate::names::Id;
use crate::shares::ShareMeter;
use crate::textindex::TextIndex;

/// The prefix-aware policy's knobs (RouterConfig).
#[derive(Debug, Clone)]
pub struct PrefixConfig {
    pub cap: Option<i64>,
    pub epsilon: f64,
    pub min_ceiling: i64,
    pub block_chars: usize,
    pub home_blocks: usize,
    pub home_choices: usize,
    pub prefill_aware: bool,
    pub balance_epsilon: f64,
    pub balance_slack: f64,
}

/// The fleet at decision time: names (sorted), this router's in-flight counts, the peer routers' in-flight
/// counts, prefill backlogs. A replica's *load* is its in-flight count from every router (own + peers'): the
/// burst ceiling bounds it; the concurrency cap bounds this router's own count.
pub struct Fleet<'a> {
    pub names: &'a [&'a str],
    pub inflight: &'a [i64],
    pub peers: &'a [i64],
    pub prefill_chars: &'a [i64],
}

impl Fleet<'_> {
    fn load(&self, i: usize) -> i64 {
        self.inflight[i] + self.peers[i]
    }
}

/// A request's routing key.
pub struct Key<'a> {
    pub blocks: &'a [u64],
    pub anchor: Option<u64>,
    pub anchor_chars: usize,
    pub chars: usize,
}

impl Key<'_> {
    /// The first turn of a conversation: nothing follows the anchor.
    fn fresh(&self) -> bool {
        self.anchor.is_some() && self.chars <= self.anchor_chars
    }
}

/// Ordered candidates (indexes into the fleet; first = choice), the choice's matched blocks, and a spill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub candidates: Vec<usize>,
    pub matched: usize,
    pub spilled: bool,
}

/// The burst ceiling over every router's in-flight requests (the cap, this router's own, is apart).
fn ceiling(cfg: &PrefixConfig, fleet: &Fleet<'_>) -> i64 {
    let total: i64 = (0..fleet.names.len()).map(|i| fleet.load(i)).sum();
    load_ceiling(total, fleet.names.len(), cfg.epsilon, cfg.min_ceiling)
}

/// The ranked replicas under the burst ceiling and their share `bound(position, i)`, in rank order; the
/// others, least in flight first; and whether the best-ranked one was passed over (a spill).
fn split<F: Fn(usize, usize) -> f64>(
    ranked: &[usize],
    bound: F,
    ceiling: i64,
    cap: Option<i64>,
    fleet: &Fleet<'_>,
    shares: &ShareMeter,
) -> (Vec<usize>, Vec<usize>, bool) {
    let (mut first, mut rest) = (Vec::new(), Vec::new());
    for (position, &i) in ranked.iter().enumerate() {
        let under_cap = cap.is_none_or(|cap| fleet.inflight[i] < cap);
        if fleet.load(i) < ceiling && under_cap && shares.recent(fleet.names[i]) < bound(position, i) {
            first.push(i);
        } else {
            rest.push(i);
        }
    }
    let spilled = !ranked.is_empty() && first.first() != ranked.first();
    rest.sort_by_key(|&i| fleet.inflight[i]);
    (first, rest, spilled)
}

/// Per fleet position, the leading blocks of `blocks` the text index says it holds.
fn text_matches(index: &mut TextIndex, blocks: &[u64], fleet: &Fleet<'_>) -> (Vec<usize>, Vec<Id>) {
    let ids: Vec<Id> = fleet.names.iter().map(|name| index.names.id(name)).collect();
    let mut matched = vec![0usize; ids.len()];
    for (id, depth) in index.match_ids(blocks, &ids) {
        if let Some(i) = ids.iter().position(|&other| other == id) {
            matched[i] = depth;
        }
    }
    (matched, ids)
}

/// The prefix-aware pick (module doc of `warmstart.router.strategies`); `None` for a key with neither
/// blocks nor an anchor (shorter than a block: the caller balances load instead).
pub fn prefix_pick(
    cfg: &PrefixConfig,
    index: &mut TextIndex,
    shares: &ShareMeter,
    fleet: &Fleet<'_>,
    key: &Key<'_>,
) -> Option<Decision> {
    if key.anchor.is_some() {
        return Some(conversation_pick(cfg, index, shares, fleet, key));
    }
    if key.blocks.is_empty() {
        return None;
    }
    let home = key.blocks[key.blocks.len().min(cfg.home_blocks.max(1)) - 1];
    let order = rendezvous(&Part::Int(home.into()), fleet.names);
    let mut rank = vec![0usize; order.len()];
    for (position, &i) in order.iter().enumerate() {
        rank[i] = position;
    }
    let (matched, ids) = text_matches(index, key.blocks, fleet);
    // rule 2: the longest match first, rendezvous order among equals (a stable sort)
    let mut ranked = order.clone();
    ranked.sort_by_key(|&i| std::cmp::Reverse(matched[i]));
    let ceiling = ceiling(cfg, fleet);
    let total = shares.total();
    let n = fleet.names.len();
    // rule 4b: keeping a prefix where it is cached may run `slack` requests ahead; placing it one fewer
    let placing = share_bound(total, n, cfg.balance_epsilon, (cfg.balance_slack - 1.0).max(0.0));
    let keeping = share_bound(total, n, cfg.balance_epsilon, cfg.balance_slack);
    let (mut first, rest, spilled) =
        split(&ranked, |_, i| if matched[i] > 0 { keeping } else { placing }, ceiling, cfg.cap, fleet, shares);
    if let Some(&head) = first.first() {
        let backlog = |i: usize| if cfg.prefill_aware { fleet.prefill_chars[i] } else { 0 };
        let best_match = matched[head];
        let best = if best_match == 0 {
            // cached nowhere eligible: the least loaded of the first few homes (power of choices)
            let width = cfg.home_choices.max(if cfg.prefill_aware { 2 } else { 1 }).min(first.len());
            let by_load = cfg.home_choices > 1;
            *first[..width]
                .iter()
                .min_by_key(|&&i| (backlog(i), if by_load { fleet.inflight[i] } else { 0 }, rank[i]))
                .unwrap_or(&head)
        } else {
            // several hold the longest match: the smallest recent share, then the one that has held it longest
            let deepest = key.blocks[best_match - 1];
            *first
                .iter()
                .filter(|&&i| matched[i] == best_match)
                .min_by(|&&a, &&b| {
                    backlog(a)
                        .cmp(&backlog(b))
                        .then(shares.recent(fleet.names[a]).total_cmp(&shares.recent(fleet.names[b])))
                        .then(index.since(ids[a], deepest).cmp(&index.since(ids[b], deepest)))
                        .then(rank[a].cmp(&rank[b]))
                })
                .unwrap_or(&head)
        };
        promote(&mut first, best);
    }
    Some(finish(first, rest, &matched, spilled))
}

fn promote(first: &mut Vec<usize>, best: usize) {
    if first.first() != Some(&best) {
        first.retain(|&i| i != best);
        first.insert(0, best);
    }
}

fn finish(mut first: Vec<usize>, rest: Vec<usize>, matched: &[usize], spilled: bool) -> Decision {
    first.extend(rest);
    let matched = first.first().map_or(0, |&i| matched[i]);
    Decision { candidates: first, matched, spilled }
}

/// A chat request, placed by its conversation's anchor (rules 5 and 6).
fn conversation_pick(cfg: &PrefixConfig, index: &mut TextIndex, shares: &ShareMeter, fleet: &Fleet<'_>, key: &Key<'_>) -> Decision {
    let anchor = key.anchor.unwrap_or_default();
    let order = rendezvous(&Part::Int(anchor.into()), fleet.names);
    let (matched, ids) = text_matches(index, key.blocks, fleet);
    let held = index.holders(anchor);
    let holder: Vec<bool> = ids.iter().map(|id| held.contains(id)).collect();
    let holders = holder.iter().filter(|&&h| h).count();
    // where this router sent the conversation (deepest history first), then the anchor's order
    let mut ranked = order;
    ranked.sort_by_key(|&i| if holder[i] { (0, std::cmp::Reverse(matched[i])) } else { (1, std::cmp::Reverse(0)) });
    let ceiling = ceiling(cfg, fleet);
    let total = shares.total();
    let n = fleet.names.len();
    let keeping = share_bound(total, n, cfg.balance_epsilon, cfg.balance_slack);
    let placing = share_bound(total, n, cfg.balance_epsilon, 0.0);
    // a holder has the conversation's own history when it matches a whole block past the anchor's last
    // one, or when it is the anchor's only holder; several holders and no history: a shared opening
    let past_anchor = key.anchor_chars.div_ceil(cfg.block_chars.max(1));
    let own: Vec<bool> = (0..n).map(|i| holder[i] && (holders == 1 || matched[i] > past_anchor)).collect();
    let fresh = key.fresh();
    let bound = |position: usize, i: usize| {
        if !fresh && (own[i] || (position == 0 && holders == 0)) {
            f64::INFINITY // a conversation stays where it is: only the burst ceiling and the cap move it
        } else if holder[i] {
            keeping // a repeated first turn or a shared opening is a hot prefix
        } else {
            placing // a new conversation: the share bound without slack
        }
    };
    let (first, rest, spilled) = split(&ranked, bound, ceiling, cfg.cap, fleet, shares);
    finish(first, rest, &matched, spilled)
}

/// The engine-aware policy's knobs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub cap: Option<i64>,
    pub balance_epsilon: f64,
    pub balance_slack: f64,
}

/// What the engine-aware pick knows per replica: this router's in-flight count (for the cap and ties), tokens
/// matched, load (engine-reported, else every router's in-flight count), engine request rates.
pub struct EngineView<'a> {
    pub names: &'a [&'a str],
    pub inflight: &'a [i64],
    pub matched_tokens: &'a [usize],
    pub load: &'a [f64],
    pub rates: &'a [Option<f64>],
}

fn cmp_f64(a: f64, b: f64) -> Ordering {
    a.total_cmp(&b)
}

/// The engine-aware pick (module doc of `warmstart.router.enginerouting`), ranked by rendezvous on `seed`
/// (none: by name). Returns the candidates and whether the deepest match was passed over.
pub fn engine_pick(cfg: &EngineConfig, view: &EngineView<'_>, seed: Option<u64>) -> (Vec<usize>, bool) {
    let n = view.names.len();
    if n == 0 {
        return (Vec::new(), false);
    }
    let order = match seed {
        Some(seed) => rendezvous(&Part::Int(seed.into()), view.names),
        None => {
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| view.names[a].cmp(view.names[b]));
            order
        }
    };
    let mut rank = vec![0usize; n];
    for (position, &i) in order.iter().enumerate() {
        rank[i] = position;
    }
    let (load, matched, inflight) = (view.load, view.matched_tokens, view.inflight);
    let mean = (load.iter().sum::<f64>() + 1.0) / n as f64;
    // rule 3: under the load bound (one request less to place a prefix not held) and the cap
    let keeping = (1.0 + cfg.balance_epsilon) * mean + cfg.balance_slack;
    let placing = (1.0 + cfg.balance_epsilon) * mean + (cfg.balance_slack - 1.0).max(0.0);
    let band = (cfg.balance_epsilon * mean).max(1.0);
    let eligible = |i: usize| {
        let bound = if matched[i] > 0 { keeping } else { placing };
        load[i] < bound && cfg.cap.is_none_or(|cap| inflight[i] < cap)
    };
    let mut ranked: Vec<usize> = (0..n).collect();
    ranked.sort_by(|&a, &b| {
        matched[b]
            .cmp(&matched[a])
            .then(cmp_f64(load[a], load[b]))
            .then(inflight[a].cmp(&inflight[b]))
            .then(rank[a].cmp(&rank[b]))
    });
    let mut first: Vec<usize> = ranked.iter().copied().filter(|&i| eligible(i)).collect();
    let mut rest: Vec<usize> = ranked.iter().copied().filter(|&i| !eligible(i)).collect();
    rest.sort_by(|&a, &b| cmp_f64(load[a], load[b]).then(inflight[a].cmp(&inflight[b])).then(rank[a].cmp(&rank[b])));
    if let Some(&head) = first.first() {
        // rule 4: among the deepest matches, those within one band of the least loaded are equal
        let deepest = matched[head];
        let group: Vec<usize> = first.iter().copied().filter(|&i| matched[i] == deepest).collect();
        let lowest = group.iter().map(|&i| load[i]).fold(f64::INFINITY, f64::min);
        let mut tied: Vec<usize> = group.into_iter().filter(|&i| load[i] < lowest + band).collect();
        // then the engines' request rates: the least served within one band of rate
        let known: Vec<f64> = tied.iter().filter_map(|&i| view.rates[i]).collect();
        if known.len() == tied.len() && tied.len() > 1 {
            let mean_rate = known.iter().sum::<f64>() / known.len() as f64;
            let slowest = known.iter().copied().fold(f64::INFINITY, f64::min);
            let rate_band = (cfg.balance_epsilon * mean_rate).max(1e-9);
            tied.retain(|&i| view.rates[i].unwrap_or(0.0) < slowest + rate_band);
        }
        let best = tied.iter().copied().min_by_key(|&i| rank[i]).unwrap_or(head);
        promote(&mut first, best);
    }
    first.extend(rest);
    let spilled = matched[first[0]] < matched[ranked[0]];
    (first, spilled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> PrefixConfig {
        PrefixConfig {
            cap: None,
            epsilon: 0.25,
            min_ceiling: 2,
            block_chars: 4,
            home_blocks: 1,
            home_choices: 1,
            prefill_aware: false,
            balance_epsilon: 0.5,
            balance_slack: 2.0,
        }
    }

    const NAMES: [&str; 4] = ["a", "b", "c", "d"];

    fn pick(index: &mut TextIndex, shares: &ShareMeter, inflight: &[i64], blocks: &[u64]) -> Decision {
        let fleet = Fleet { names: &NAMES, inflight, peers: &[0; 4], prefill_chars: &[0; 4] };
        let key = Key { blocks, anchor: None, anchor_chars: 0, chars: blocks.len() * 4 };
        prefix_pick(&config(), index, shares, &fleet, &key).unwrap()
    }

    #[test]
    fn a_prefix_cached_nowhere_goes_to_its_rendezvous_home() {
        let mut index = TextIndex::new(100);
        let shares = ShareMeter::new(100);
        let decision = pick(&mut index, &shares, &[0; 4], &[42, 43]);
        let home = rendezvous(&Part::Int(42), &NAMES)[0];
        assert_eq!(decision.candidates[0], home);
        assert_eq!(decision.candidates.len(), 4);
        assert!(!decision.spilled);
    }

    #[test]
    fn the_longest_match_wins_while_it_is_under_the_bounds() {
        let mut index = TextIndex::new(100);
        let shares = ShareMeter::new(100);
        index.record("c", &[1, 2, 3]);
        index.record("b", &[1]);
        let decision = pick(&mut index, &shares, &[0; 4], &[1, 2, 3, 4]);
        assert_eq!((decision.candidates[0], decision.matched), (2, 3));
        assert_eq!(decision.candidates[1], 1, "the next deepest match is the first fallback");
    }

    #[test]
    fn a_replica_at_the_burst_ceiling_is_passed_over_and_that_is_a_spill() {
        let mut index = TextIndex::new(100);
        let shares = ShareMeter::new(100);
        index.record("c", &[1, 2]);
        // total 9 in flight over 4: ceiling = ceil(1.25 x 10 / 4) = 4; c has 6
        let decision = pick(&mut index, &shares, &[1, 1, 6, 1], &[1, 2]);
        assert_ne!(decision.candidates[0], 2);
        assert!(decision.spilled);
        assert_eq!(*decision.candidates.last().unwrap(), 2, "over the ceiling: last, least loaded first");
    }

    #[test]
    fn peers_requests_count_in_the_load_but_not_against_this_routers_cap() {
        let mut index = TextIndex::new(100);
        let shares = ShareMeter::new(100);
        index.record("c", &[1, 2]);
        let key = Key { blocks: &[1, 2], anchor: None, anchor_chars: 0, chars: 8 };
        // peers have 6 on c: load 9 over 4, ceiling 4: c is passed over
        let fleet = Fleet { names: &NAMES, inflight: &[1, 1, 0, 1], peers: &[0, 0, 6, 0], prefill_chars: &[0; 4] };
        let decision = prefix_pick(&config(), &mut index, &shares, &fleet, &key).unwrap();
        assert_ne!(decision.candidates[0], 2);
        // a cap of 2 on this router's own count: the peers' requests do not fill it
        let capped = PrefixConfig { cap: Some(2), min_ceiling: 100, ..config() };
        let decision = prefix_pick(&capped, &mut index, &shares, &fleet, &key).unwrap();
        assert_eq!(decision.candidates[0], 2);
    }

    #[test]
    fn a_replica_over_its_share_bound_is_passed_over() {
        let mut index = TextIndex::new(100);
        let mut shares = ShareMeter::new(100);
        index.record("a", &[7]);
        for _ in 0..20 {
            shares.add("a");
        }
        // bound with slack: 1.5 x 21 / 4 + 2 = 9.875 < a's ~18
        let decision = pick(&mut index, &shares, &[0; 4], &[7]);
        assert_ne!(decision.candidates[0], 0);
        assert!(decision.spilled);
    }

    #[test]
    fn equal_matches_go_to_the_smaller_recent_share() {
        let mut index = TextIndex::new(100);
        let mut shares = ShareMeter::new(100);
        index.record("a", &[5]);
        index.record("d", &[5]);
        shares.add("a");
        let decision = pick(&mut index, &shares, &[0; 4], &[5]);
        assert_eq!(decision.candidates[0], 3);
    }

    #[test]
    fn a_continuing_conversation_stays_with_its_holder_past_the_share_bound() {
        let mut index = TextIndex::new(100);
        let mut shares = ShareMeter::new(100);
        index.record("b", &[1, 2, 99]);
        for _ in 0..30 {
            shares.add("b");
        }
        let fleet = Fleet { names: &NAMES, inflight: &[0; 4], peers: &[0; 4], prefill_chars: &[0; 4] };
        let later = Key { blocks: &[1, 2, 3], anchor: Some(99), anchor_chars: 5, chars: 12 };
        let decision = prefix_pick(&config(), &mut index, &shares, &fleet, &later).unwrap();
        assert_eq!(decision.candidates[0], 1);
        let fresh = Key { blocks: &[1, 2], anchor: Some(99), anchor_chars: 8, chars: 8 };
        let decision = prefix_pick(&config(), &mut index, &shares, &fleet, &fresh).unwrap();
        assert_ne!(decision.candidates[0], 1, "a repeated first turn is held to the share bound");
    }

    #[test]
    fn no_blocks_and_no_anchor_is_left_to_the_caller() {
        let mut index = TextIndex::new(10);
        let fleet = Fleet { names: &NAMES, inflight: &[0; 4], peers: &[0; 4], prefill_chars: &[0; 4] };
        let key = Key { blocks: &[], anchor: None, anchor_chars: 0, chars: 2 };
        assert!(prefix_pick(&config(), &mut index, &ShareMeter::new(10), &fleet, &key).is_none());
    }

    fn engine(matched: &[usize], load: &[f64], rates: &[Option<f64>]) -> (Vec<usize>, bool) {
        let cfg = EngineConfig { cap: None, balance_epsilon: 0.5, balance_slack: 2.0 };
        let view = EngineView { names: &NAMES, inflight: &[0; 4], matched_tokens: matched, load, rates };
        engine_pick(&cfg, &view, Some(7))
    }

    #[test]
    fn the_engine_pick_takes_the_deepest_match_under_the_load_bound() {
        let (candidates, spilled) = engine(&[0, 32, 16, 0], &[0.0; 4], &[None; 4]);
        assert_eq!(candidates[..2], [1, 2]);
        assert!(!spilled);
        // mean (0+20+0+0+1)/4 = 5.25; keeping 1.5 x 5.25 + 2 = 9.875: b at 20 is over
        let (candidates, spilled) = engine(&[0, 32, 16, 0], &[0.0, 20.0, 0.0, 0.0], &[None; 4]);
        assert_eq!(candidates[0], 2);
        assert_eq!(*candidates.last().unwrap(), 1);
        assert!(spilled);
    }

    #[test]
    fn equally_loaded_and_unmatched_replicas_are_ordered_by_rendezvous_then_rate() {
        let order = rendezvous(&Part::Int(7), &NAMES);
        let (candidates, _) = engine(&[0; 4], &[0.0; 4], &[None; 4]);
        assert_eq!(candidates[0], order[0]);
        let mut rates = [Some(1.0); 4];
        rates[order[0]] = Some(5.0);
        let (candidates, _) = engine(&[0; 4], &[0.0; 4], &rates);
        assert_eq!(candidates[0], order[1], "the home serves more than its share: the next one");
    }
}
