//! Load accounting beside this router's own in-flight counts: peer routers' in-flight requests, and the bounds.
//!
//! A replica's load as the pick sees it is this router's own in-flight count plus what every peer
//! router last reported for it (by peer id: a peer's new report replaces its old one); the pickers
//! take the per-replica sums ([`PeerLoads::totals`]). The bounded-load rules read these sums.

use std::collections::HashMap;

/// Peer routers' in-flight requests per replica, by peer id.
#[derive(Debug, Default)]
pub struct PeerLoads {
    peers: HashMap<String, HashMap<String, i64>>,
}

impl PeerLoads {
    /// `peer` now has `counts` requests in flight per replica (replacing its previous report).
    pub fn set(&mut self, peer: &str, counts: HashMap<String, i64>) {
        self.peers.insert(peer.to_owned(), counts);
    }

    /// `peer` is gone: its requests no longer count.
    pub fn forget(&mut self, peer: &str) {
        self.peers.remove(peer);
    }

    /// In-flight requests peers report for `replica`.
    pub fn inflight(&self, replica: &str) -> i64 {
        self.peers.values().filter_map(|counts| counts.get(replica)).map(|&count| count.max(0)).sum()
    }

    /// In-flight requests the peers report, per replica (replicas with none are left out).
    pub fn totals(&self) -> HashMap<String, i64> {
        let mut totals = HashMap::new();
        for counts in self.peers.values() {
            for (replica, &count) in counts {
                if count > 0 {
                    *totals.entry(replica.clone()).or_insert(0) += count;
                }
            }
        }
        totals
    }

    /// Peers that reported.
    pub fn peers(&self) -> Vec<String> {
        let mut peers: Vec<String> = self.peers.keys().cloned().collect();
        peers.sort();
        peers
    }
}

/// Bounded-load ceiling: `max(min_ceiling, ceil((1+eps) x (in-flight + 1) / replicas))`.
pub fn load_ceiling(total_inflight: i64, replicas: usize, epsilon: f64, min_ceiling: i64) -> i64 {
    if replicas == 0 {
        return min_ceiling;
    }
    let mean = (total_inflight as f64 + 1.0) / replicas as f64;
    min_ceiling.max(((1.0 + epsilon) * mean - 1e-9).ceil() as i64)
}

/// Request-share ceiling: `(1+eps) x (recent requests + 1) / replicas + slack`.
pub fn share_bound(recent_total: f64, replicas: usize, epsilon: f64, slack: f64) -> f64 {
    if replicas == 0 {
        return slack;
    }
    (1.0 + epsilon) * (recent_total + 1.0) / replicas as f64 + slack
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_a_bounded_multiple_of_the_mean_with_a_floor() {
        assert_eq!(load_ceiling(0, 4, 0.25, 2), 2);
        assert_eq!(load_ceiling(39, 4, 0.25, 2), 13, "ceil(1.25 x 40 / 4) = 12.5 -> 13");
        assert_eq!(load_ceiling(31, 4, 0.25, 2), 10, "exactly 10, not 11 from float noise");
        assert_eq!(load_ceiling(5, 0, 0.25, 3), 3);
    }

    #[test]
    fn the_share_bound_is_the_mean_share_with_headroom_and_slack() {
        assert!((share_bound(7.0, 4, 0.5, 1.0) - 4.0).abs() < 1e-12);
        assert_eq!(share_bound(7.0, 0, 0.5, 1.0), 1.0);
    }

    #[test]
    fn peers_counts_add_up_and_a_report_replaces_the_last() {
        let mut peers = PeerLoads::default();
        peers.set("r1", HashMap::from([("a".to_string(), 2), ("b".to_string(), 1)]));
        peers.set("r2", HashMap::from([("a".to_string(), 3)]));
        assert_eq!(peers.inflight("a"), 5);
        peers.set("r1", HashMap::from([("a".to_string(), 0)]));
        assert_eq!(peers.inflight("a"), 3);
        assert_eq!(peers.inflight("b"), 0);
        peers.forget("r2");
        assert_eq!(peers.inflight("a"), 0);
    }
}
