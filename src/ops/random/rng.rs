//! The generator behind every random operator: PCG XSL RR 128/64 (the
//! `oorandom` crate's `Rand64`), seeded from the node's `seed` attribute or
//! afresh on each run, with uniform draws in [0, 1) and normal draws by the
//! Box–Muller transform.

use crate::error::Result;
use crate::ir::attributes::Attributes;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a node's draws start: a fixed seed (the same values every run) or
/// a fresh one per run.
#[derive(Debug)]
pub(crate) struct Seed {
    /// The seed from the node's attribute, if it has one.
    fixed: Option<u64>,
    /// Runs of this node so far, mixed into a fresh seed.
    runs: AtomicU64,
}

impl Seed {
    /// A seed fixed to `seed`, or fresh per run when `None`.
    pub(crate) fn new(fixed: Option<u64>) -> Seed {
        Seed {
            fixed,
            runs: AtomicU64::new(0),
        }
    }

    /// From a float `seed` attribute (RandomUniform, Bernoulli, ...): the
    /// value's bits.
    pub(crate) fn from_float_attr(attrs: &Attributes) -> Result<Seed> {
        let seed = attrs.float_opt("seed")?;
        if seed.is_some_and(|s| !s.is_finite()) {
            return Err(attrs.error("seed", "must be finite"));
        }
        Ok(Seed::new(seed.map(|s| s.to_bits() as u64)))
    }

    /// From an int `seed` attribute (Dropout).
    pub(crate) fn from_int_attr(attrs: &Attributes) -> Result<Seed> {
        Ok(Seed::new(attrs.int_opt("seed")?.map(|s| s as u64)))
    }

    /// A generator for one run: from the fixed seed, or from the time, this
    /// node's address and its run count.
    pub(crate) fn rng(&self) -> Rng {
        let seed = self.fixed.unwrap_or_else(|| {
            let run = self.runs.fetch_add(1, Ordering::Relaxed);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let node = std::ptr::from_ref(self) as usize as u64;
            nanos ^ splitmix(run) ^ splitmix(node).rotate_left(17)
        });
        Rng::new(seed)
    }
}

/// SplitMix64's finaliser: spreads a seed's bits over all 64.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// One run's stream of random numbers.
pub(crate) struct Rng {
    pcg: oorandom::Rand64,
    /// The second value of the last Box–Muller pair, not yet used.
    spare: Option<f64>,
}

impl Rng {
    /// The stream of `seed` (the same seed gives the same stream).
    pub(crate) fn new(seed: u64) -> Rng {
        let state = (u128::from(splitmix(seed)) << 64) | u128::from(splitmix(!seed));
        Rng {
            pcg: oorandom::Rand64::new(state),
            spare: None,
        }
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    pub(crate) fn uniform(&mut self) -> f64 {
        (self.pcg.rand_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal draw (Box–Muller: two per pair of uniforms).
    pub(crate) fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        // 1 − u is in (0, 1], so its log is finite.
        let r = (-2.0 * (1.0 - self.uniform()).ln()).sqrt();
        let theta = std::f64::consts::TAU * self.uniform();
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }
}
