//! Each replica's share of the recent requests a router sent: exponentially decayed counts, O(1) per request.
//!
//! The decay is per request: with window W a request sent k requests ago counts (1 - 1/W)^k, and
//! the counts over all replicas add up to at most W. Instead of decaying every count, the weight
//! of the next request grows; counts are rescaled before floats lose precision.

use std::collections::HashMap;

const RESCALE_ABOVE: f64 = 1e12;

/// Decayed per-replica request counts over roughly the last `window` requests.
#[derive(Debug)]
pub struct ShareMeter {
    grow: f64,
    unit: f64,
    counts: HashMap<String, f64>,
    total: f64,
}

impl ShareMeter {
    pub fn new(window: usize) -> Self {
        ShareMeter { grow: 1.0 / (1.0 - 1.0 / (window.max(2) as f64)), unit: 1.0, counts: HashMap::new(), total: 0.0 }
    }

    /// `replica` was sent one more request.
    pub fn add(&mut self, replica: &str) {
        let unit = self.unit;
        match self.counts.get_mut(replica) {
            Some(count) => *count += unit,
            None => {
                self.counts.insert(replica.to_owned(), 0.0 + unit);
            }
        }
        self.total += unit;
        self.unit *= self.grow;
        if self.unit > RESCALE_ABOVE {
            let scale = 1.0 / self.unit;
            for count in self.counts.values_mut() {
                *count *= scale;
            }
            self.total *= scale;
            self.unit = 1.0;
        }
    }

    /// Decayed count of requests sent to `replica` (each request counts `1 - 1/window` once the next one is sent).
    pub fn recent(&self, replica: &str) -> f64 {
        self.counts.get(replica).copied().unwrap_or(0.0) / self.unit
    }

    /// Decayed count of requests sent to all replicas still known.
    pub fn total(&self) -> f64 {
        self.total / self.unit
    }

    /// `replica` left the fleet: its requests no longer count.
    pub fn forget(&mut self, replica: &str) {
        self.total -= self.counts.remove(replica).unwrap_or(0.0);
        self.total = self.total.max(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_decays_every_earlier_one_by_one_window_step() {
        let mut meter = ShareMeter::new(10);
        meter.add("a");
        assert!((meter.recent("a") - 0.9).abs() < 1e-12);
        meter.add("b");
        assert!((meter.recent("a") - 0.81).abs() < 1e-12);
        assert!((meter.recent("b") - 0.9).abs() < 1e-12);
        assert!((meter.total() - 1.71).abs() < 1e-12);
    }

    #[test]
    fn the_counts_add_up_to_at_most_the_window_and_survive_rescaling() {
        let mut meter = ShareMeter::new(50);
        for i in 0..100_000 {
            meter.add(if i % 4 == 0 { "a" } else { "b" });
        }
        assert!(meter.total() <= 50.0 + 1e-6);
        assert!((meter.recent("a") / meter.total() - 0.25).abs() < 0.02);
        meter.forget("b");
        assert!((meter.total() - meter.recent("a")).abs() < 1e-6);
    }
}
