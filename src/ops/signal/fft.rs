//! Complex discrete Fourier transforms of any length in f64: an iterative
//! radix-2 FFT for powers of two, and Bluestein's chirp-z algorithm (a
//! convolution through a power-of-two FFT) for every other length, so every
//! transform costs O(n log n). Twiddles are computed directly (no
//! recurrences) and chirp angles reduced modulo 2n, which keeps the error at
//! a few ulps times log n.

use std::f64::consts::PI;

/// A complex number.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct C {
    pub re: f64,
    pub im: f64,
}

impl C {
    pub fn new(re: f64, im: f64) -> C {
        C { re, im }
    }

    /// `e^{i angle}`.
    fn expi(angle: f64) -> C {
        C::new(angle.cos(), angle.sin())
    }

    pub fn conj(self) -> C {
        C::new(self.re, -self.im)
    }

    fn add(self, o: C) -> C {
        C::new(self.re + o.re, self.im + o.im)
    }

    fn sub(self, o: C) -> C {
        C::new(self.re - o.re, self.im - o.im)
    }

    fn mul(self, o: C) -> C {
        C::new(
            self.re * o.re - self.im * o.im,
            self.re * o.im + self.im * o.re,
        )
    }

    fn scale(self, s: f64) -> C {
        C::new(self.re * s, self.im * s)
    }
}

/// `e^{-2πi j/n}` for `j < n/2`.
fn twiddles(n: usize) -> Vec<C> {
    (0..n / 2)
        .map(|j| C::expi(-2.0 * PI * j as f64 / n as f64))
        .collect()
}

/// In-place radix-2 FFT of `a` (length a power of two) with `twiddles(len)`.
fn fft_pow2(a: &mut [C], tw: &[C]) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = i.reverse_bits() >> (usize::BITS - bits);
        if i < j {
            a.swap(i, j);
        }
    }
    let mut len = 2;
    while len <= n {
        let half = len / 2;
        let step = n / len;
        for block in a.chunks_mut(len) {
            let (lo, hi) = block.split_at_mut(half);
            for (j, (u, v)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
                let t = v.mul(tw[j * step]);
                *v = u.sub(t);
                *u = u.add(t);
            }
        }
        len *= 2;
    }
}

/// A precomputed transform of one length.
#[derive(Debug)]
pub(super) struct Plan {
    n: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A power-of-two length.
    Radix2 { tw: Vec<C> },
    /// Bluestein: `chirp[k] = e^{-iπ k²/n}`, `filter` the FFT (length `m`)
    /// of the conjugate chirp laid out for a circular convolution.
    Bluestein {
        chirp: Vec<C>,
        filter: Vec<C>,
        tw: Vec<C>,
    },
}

impl Plan {
    /// The plan for transforms of length `n`.
    pub fn new(n: usize) -> Plan {
        if n.is_power_of_two() || n == 0 {
            return Plan {
                n,
                kind: Kind::Radix2 { tw: twiddles(n) },
            };
        }
        let two_n = 2 * n as u128;
        let chirp: Vec<C> = (0..n)
            .map(|k| {
                let r = (k as u128 * k as u128) % two_n;
                C::expi(-PI * r as f64 / n as f64)
            })
            .collect();
        let m = (2 * n - 1).next_power_of_two();
        let tw = twiddles(m);
        let mut filter = vec![C::default(); m];
        filter[0] = chirp[0].conj();
        for k in 1..n {
            filter[k] = chirp[k].conj();
            filter[m - k] = chirp[k].conj();
        }
        fft_pow2(&mut filter, &tw);
        Plan {
            n,
            kind: Kind::Bluestein { chirp, filter, tw },
        }
    }

    /// The transform length.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Scratch space [`Plan::forward`] needs.
    pub fn scratch(&self) -> Vec<C> {
        match &self.kind {
            Kind::Radix2 { .. } => Vec::new(),
            Kind::Bluestein { filter, .. } => vec![C::default(); filter.len()],
        }
    }

    /// In place: `a[k] = Σ_t a[t] e^{-2πi kt/n}` (`a.len()` must be `n`).
    pub fn forward(&self, a: &mut [C], scratch: &mut [C]) {
        debug_assert_eq!(a.len(), self.n);
        match &self.kind {
            Kind::Radix2 { tw } => fft_pow2(a, tw),
            Kind::Bluestein { chirp, filter, tw } => {
                let m = filter.len();
                let inv_m = 1.0 / m as f64;
                for (k, s) in scratch.iter_mut().enumerate() {
                    *s = if k < self.n {
                        a[k].mul(chirp[k])
                    } else {
                        C::default()
                    };
                }
                fft_pow2(scratch, tw);
                // Inverse FFT of the product through conjugation.
                for (s, f) in scratch.iter_mut().zip(filter) {
                    *s = s.mul(*f).conj();
                }
                fft_pow2(scratch, tw);
                for (k, v) in a.iter_mut().enumerate() {
                    *v = scratch[k].conj().scale(inv_m).mul(chirp[k]);
                }
            }
        }
    }

    /// In place: `a[t] = (1/n) Σ_k a[k] e^{+2πi kt/n}`.
    pub fn inverse(&self, a: &mut [C], scratch: &mut [C]) {
        for v in a.iter_mut() {
            *v = v.conj();
        }
        self.forward(a, scratch);
        let s = 1.0 / self.n.max(1) as f64;
        for v in a.iter_mut() {
            *v = v.conj().scale(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[C]) -> Vec<C> {
        let n = x.len();
        (0..n)
            .map(|k| {
                x.iter().enumerate().fold(C::default(), |acc, (t, v)| {
                    let r = (k * t) % n;
                    acc.add(v.mul(C::expi(-2.0 * PI * r as f64 / n as f64)))
                })
            })
            .collect()
    }

    #[test]
    fn matches_the_naive_dft_for_all_small_lengths() {
        for n in 1..=40 {
            let x: Vec<C> = (0..n)
                .map(|i| C::new((i * 7 % 5) as f64 - 2.0, (i * 3 % 4) as f64 * 0.5))
                .collect();
            let plan = Plan::new(n);
            let mut scratch = plan.scratch();
            let mut y = x.clone();
            plan.forward(&mut y, &mut scratch);
            let want = naive(&x);
            for (a, b) in y.iter().zip(&want) {
                assert!(
                    (a.re - b.re).abs() < 1e-9 && (a.im - b.im).abs() < 1e-9,
                    "n={n}"
                );
            }
            plan.inverse(&mut y, &mut scratch);
            for (a, b) in y.iter().zip(&x) {
                assert!(
                    (a.re - b.re).abs() < 1e-12 && (a.im - b.im).abs() < 1e-12,
                    "n={n}"
                );
            }
        }
    }
}
