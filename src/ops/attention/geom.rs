//! Attention geometry: batch, head counts, sequence lengths and head sizes
//! read from the shapes of Q, K, V, the past cache and the mask, with every
//! consistency check of the ONNX spec, shared by shape inference and `run`.

use crate::error::{Error, Result};

const OP: &str = "Attention";

/// The problem sizes of one Attention node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geom {
    /// Batch size.
    pub b: usize,
    /// Query heads.
    pub hq: usize,
    /// Key/value heads (divides `hq`).
    pub hkv: usize,
    /// Query sequence length.
    pub sq: usize,
    /// New key/value sequence length (K and V).
    pub skv: usize,
    /// Past sequence length (0 without a cache).
    pub past: usize,
    /// Query/key head size.
    pub dh: usize,
    /// Value head size.
    pub dv: usize,
    /// Whether Q, K, V (and Y) are 3-D `[batch, seq, hidden]`.
    pub rank3: bool,
}

impl Geom {
    /// Total key/value sequence length (past plus new).
    pub fn total(&self) -> usize {
        self.past + self.skv
    }

    /// Shape of Y.
    pub fn y_shape(&self) -> Vec<usize> {
        if self.rank3 {
            vec![self.b, self.sq, self.hq * self.dv]
        } else {
            vec![self.b, self.hq, self.sq, self.dv]
        }
    }

    /// Shape of present_key.
    pub fn present_key_shape(&self) -> Vec<usize> {
        vec![self.b, self.hkv, self.total(), self.dh]
    }

    /// Shape of present_value.
    pub fn present_value_shape(&self) -> Vec<usize> {
        vec![self.b, self.hkv, self.total(), self.dv]
    }

    /// Shape of qk_matmul_output.
    pub fn qk_shape(&self) -> Vec<usize> {
        vec![self.b, self.hq, self.sq, self.total()]
    }

    /// The sizes from the shapes of Q, K, V and the optional past cache;
    /// `heads` holds the q_num_heads/kv_num_heads attributes (3-D inputs).
    pub fn new(
        q: &[usize],
        k: &[usize],
        v: &[usize],
        past: Option<(&[usize], &[usize])>,
        heads: (Option<i64>, Option<i64>),
    ) -> Result<Geom> {
        if q.len() != k.len() || q.len() != v.len() || !(q.len() == 3 || q.len() == 4) {
            return Err(Error::op(
                OP,
                format!("Q, K and V must all be 3-D or all 4-D, found shapes {q:?}, {k:?}, {v:?}"),
            ));
        }
        let mut g = if q.len() == 3 {
            let count = |name: &str, h: Option<i64>| -> Result<usize> {
                match h {
                    Some(h) if h >= 1 => Ok(h as usize),
                    Some(h) => Err(Error::op(OP, format!("{name} must be ≥ 1, found {h}"))),
                    None => Err(Error::op(OP, format!("{name} is required for 3-D inputs"))),
                }
            };
            let (hq, hkv) = (
                count("q_num_heads", heads.0)?,
                count("kv_num_heads", heads.1)?,
            );
            let split = |name: &str, hidden: usize, h: usize| -> Result<usize> {
                if !hidden.is_multiple_of(h) {
                    return Err(Error::op(
                        OP,
                        format!("{name} hidden size {hidden} is not a multiple of {h} heads"),
                    ));
                }
                Ok(hidden / h)
            };
            if k[1] != v[1] {
                return Err(Error::op(
                    OP,
                    format!("K and V sequence lengths differ: {k:?} and {v:?}"),
                ));
            }
            Geom {
                b: q[0],
                hq,
                hkv,
                sq: q[1],
                skv: k[1],
                past: 0,
                dh: split("Q", q[2], hq)?,
                dv: split("V", v[2], hkv)?,
                rank3: true,
            }
            .check_k_head(split("K", k[2], hkv)?)?
        } else {
            if k[1] != v[1] || k[2] != v[2] {
                return Err(Error::op(
                    OP,
                    format!("K and V heads or sequence lengths differ: {k:?} and {v:?}"),
                ));
            }
            Geom {
                b: q[0],
                hq: q[1],
                hkv: k[1],
                sq: q[2],
                skv: k[2],
                past: 0,
                dh: q[3],
                dv: v[3],
                rank3: false,
            }
            .check_k_head(k[3])?
        };
        if k[0] != g.b || v[0] != g.b {
            return Err(Error::op(
                OP,
                format!("batch sizes differ: Q {q:?}, K {k:?}, V {v:?}"),
            ));
        }
        if g.hkv == 0 || g.hq % g.hkv != 0 {
            return Err(Error::op(
                OP,
                format!(
                    "q heads ({}) must be a multiple of kv heads ({})",
                    g.hq, g.hkv
                ),
            ));
        }
        if let Some((pk, pv)) = past {
            let want_k = [g.b, g.hkv, pk.get(2).copied().unwrap_or(0), g.dh];
            let want_v = [g.b, g.hkv, want_k[2], g.dv];
            if pk != want_k || pv != want_v {
                return Err(Error::op(
                    OP,
                    format!(
                        "past_key {pk:?} / past_value {pv:?} do not match [batch, kv_heads, \
                         past_seq, head_size] = {want_k:?} / {want_v:?}"
                    ),
                ));
            }
            g.past = want_k[2];
        }
        Ok(g)
    }

    fn check_k_head(self, dk: usize) -> Result<Geom> {
        if dk != self.dh {
            return Err(Error::op(
                OP,
                format!("Q head size {} and K head size {dk} differ", self.dh),
            ));
        }
        Ok(self)
    }

    /// Checks that a mask of shape `m` broadcasts to `[batch, q_heads,
    /// q_seq, total]` once its last axis is padded to `total`; returns the
    /// shape right-aligned to rank 4.
    pub fn mask_dims(&self, m: &[usize]) -> Result<[usize; 4]> {
        let bad = || {
            Error::op(
                OP,
                format!(
                    "attn_mask shape {m:?} does not broadcast to {:?}",
                    self.qk_shape()
                ),
            )
        };
        if m.is_empty() || m.len() > 4 {
            return Err(bad());
        }
        let mut d = [1usize; 4];
        d[4 - m.len()..].copy_from_slice(m);
        let target = [self.b, self.hq, self.sq];
        if d[..3].iter().zip(&target).any(|(&a, &t)| a != 1 && a != t) || d[3] > self.total() {
            return Err(bad());
        }
        Ok(d)
    }
}
