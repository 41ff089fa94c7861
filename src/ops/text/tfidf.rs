//! TfIdfVectorizer (opset 9): counts, per row of a `[C]` or `[N, C]` tensor
//! of int32/int64 or string tokens, the n-grams of the pool (`pool_int64s` or
//! `pool_strings`, grouped by length through `ngram_counts`) whose length is
//! in `[min_gram_length, max_gram_length]`, taking tokens `d` apart for every
//! `d` in `1..=max_skip_count + 1` (unigrams once). Counts go to coordinate
//! `ngram_indexes[i]` of the pool's i-th n-gram; `mode` TF keeps them, IDF
//! gives `weights[j]` where a count is nonzero, TFIDF `weights[j]·count`.
//! Weights are read by output coordinate `j`, as onnxruntime and ONNX's
//! reference do (and as skl2onnx writes them); without weights, all are 1.

use super::{fact_len, strings};
use crate::error::{Error, Result};
use crate::ir::attributes::Attributes;
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input};
use crate::tensor::{budget, DType, Tensor};
use std::collections::HashMap;

const OP: &str = "TfIdfVectorizer";

/// An id no pool token has.
const UNKNOWN: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Tf,
    Idf,
    TfIdf,
}

#[derive(Debug)]
struct TfIdfVectorizer {
    mode: Mode,
    min_len: usize,
    max_len: usize,
    max_skip: usize,
    /// The pool's tokens and their ids (one of the two is empty).
    int_tokens: HashMap<i64, u32>,
    str_tokens: HashMap<String, u32>,
    strings: bool,
    /// The counted n-grams (lengths in range) as token ids, to their
    /// output coordinate.
    ngrams: HashMap<Vec<u32>, usize>,
    /// Output coordinates per row.
    width: usize,
    /// Per output coordinate (empty: all 1).
    weights: Vec<f32>,
}

fn positive(a: &Attributes, name: &str, min: i64) -> Result<usize> {
    let v = a.int_req(name)?;
    if v < min {
        return Err(a.error(name, format!("must be at least {min}, found {v}")));
    }
    usize::try_from(v).map_err(|_| a.error(name, format!("{v} is too large")))
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let mode = match a
        .string_opt("mode")?
        .ok_or_else(|| a.error("mode", "required but missing"))?
        .as_str()
    {
        "TF" => Mode::Tf,
        "IDF" => Mode::Idf,
        "TFIDF" => Mode::TfIdf,
        other => return Err(a.error("mode", format!("must be TF, IDF or TFIDF, found {other:?}"))),
    };
    let min_len = positive(a, "min_gram_length", 1)?;
    let max_len = positive(a, "max_gram_length", 1)?;
    if max_len < min_len {
        return Err(a.error(
            "max_gram_length",
            format!("{max_len} is less than min_gram_length {min_len}"),
        ));
    }
    let max_skip = positive(a, "max_skip_count", 0)?;
    // The pool as token ids, with the tokens' id maps.
    let (ids, int_tokens, str_tokens, strings) =
        match (a.ints_opt("pool_int64s")?, a.strings_opt("pool_strings")?) {
            (Some(p), None) => {
                let mut m = HashMap::new();
                let ids: Vec<u32> = p.iter().map(|t| intern(&mut m, *t)).collect();
                (ids, m, HashMap::new(), false)
            }
            (None, Some(p)) => {
                let mut m = HashMap::new();
                let ids: Vec<u32> = p.into_iter().map(|t| intern(&mut m, t)).collect();
                (ids, HashMap::new(), m, true)
            }
            (Some(_), Some(_)) => {
                return Err(a.error(
                    "pool_strings",
                    "only one of pool_int64s and pool_strings may be set",
                ))
            }
            (None, None) => {
                return Err(a.error("pool_int64s", "pool_int64s or pool_strings is required"))
            }
        };
    let (ngrams, width) = ngram_table(a, &ids, min_len, max_len)?;
    let weights = a.floats_opt("weights")?.unwrap_or_default();
    if !weights.is_empty() && weights.len() < width {
        return Err(a.error(
            "weights",
            format!(
                "has {} values for {width} output coordinates",
                weights.len()
            ),
        ));
    }
    Ok(Box::new(TfIdfVectorizer {
        mode,
        min_len,
        max_len,
        max_skip,
        int_tokens,
        str_tokens,
        strings,
        ngrams,
        width,
        weights,
    }))
}

fn intern<K: std::hash::Hash + Eq>(m: &mut HashMap<K, u32>, k: K) -> u32 {
    let next = m.len() as u32;
    *m.entry(k).or_insert(next)
}

/// The n-grams with lengths in `[min_len, max_len]` to their coordinates
/// (a repeated n-gram takes its last), and the output width.
fn ngram_table(
    a: &Attributes,
    pool: &[u32],
    min_len: usize,
    max_len: usize,
) -> Result<(HashMap<Vec<u32>, usize>, usize)> {
    let counts = a
        .ints_opt("ngram_counts")?
        .ok_or_else(|| a.error("ngram_counts", "required but missing"))?;
    let indexes = a
        .ints_opt("ngram_indexes")?
        .ok_or_else(|| a.error("ngram_indexes", "required but missing"))?;
    let mut table = HashMap::new();
    let mut id = 0usize;
    for (k, &start) in counts.iter().enumerate() {
        let len = k + 1;
        let end = counts.get(k + 1).copied().unwrap_or(pool.len() as i64);
        let (start, end) = match (usize::try_from(start), usize::try_from(end)) {
            (Ok(s), Ok(e)) if s <= e && e <= pool.len() => (s, e),
            _ => {
                return Err(a.error(
                    "ngram_counts",
                    format!("{counts:?} does not split a pool of {}", pool.len()),
                ))
            }
        };
        if (end - start) % len != 0 {
            return Err(a.error(
                "ngram_counts",
                format!(
                    "the {len}-grams span {} pool items, not a multiple of {len}",
                    end - start
                ),
            ));
        }
        for gram in pool[start..end].chunks(len) {
            let at = *indexes.get(id).ok_or_else(|| {
                a.error(
                    "ngram_indexes",
                    format!("has {} entries; the pool has more n-grams", indexes.len()),
                )
            })?;
            let at = usize::try_from(at).map_err(|_| {
                a.error("ngram_indexes", format!("must not be negative, found {at}"))
            })?;
            if (min_len..=max_len).contains(&len) {
                table.insert(gram.to_vec(), at);
            }
            id += 1;
        }
    }
    if id != indexes.len() {
        return Err(a.error(
            "ngram_indexes",
            format!("has {} entries for {id} n-grams in the pool", indexes.len()),
        ));
    }
    let width = indexes.iter().map(|&i| i as usize + 1).max().unwrap_or(0);
    Ok((table, width))
}

impl TfIdfVectorizer {
    /// The token ids of the input, row-major.
    fn ids(&self, x: &Tensor) -> Result<Vec<u32>> {
        let int = |v: i64| self.int_tokens.get(&v).copied().unwrap_or(UNKNOWN);
        match (x, self.strings) {
            (Tensor::I64(a), false) => Ok(a.iter().map(|&v| int(v)).collect()),
            (Tensor::I32(a), false) => Ok(a.iter().map(|&v| int(v.into())).collect()),
            (Tensor::String(_), true) => Ok(strings(OP, "X", x)?
                .iter()
                .map(|s| self.str_tokens.get(s).copied().unwrap_or(UNKNOWN))
                .collect()),
            (other, s) => Err(Error::op(
                OP,
                format!(
                    "X must be {} with {}, found {}",
                    if s { "string" } else { "int32 or int64" },
                    if s { "pool_strings" } else { "pool_int64s" },
                    other.dtype()
                ),
            )),
        }
    }

    /// Adds one row's n-gram counts into `freq` (one row of the output).
    fn count_row(&self, row: &[u32], freq: &mut [f32]) {
        let mut gram = Vec::with_capacity(self.max_len.min(row.len()));
        // A distance past the row's end gathers no n-gram of two or more.
        let farthest = self.max_skip.saturating_add(1).min(row.len().max(1));
        for d in 1..=farthest {
            // Unigrams are the same for every distance: count them once.
            let shortest = if d == 1 {
                self.min_len
            } else {
                self.min_len.max(2)
            };
            if shortest > self.max_len {
                break;
            }
            for start in 0..row.len() {
                gram.clear();
                for at in (start..row.len()).step_by(d).take(self.max_len) {
                    gram.push(row[at]);
                    if gram.len() >= shortest {
                        if let Some(&j) = self.ngrams.get(gram.as_slice()) {
                            freq[j] += 1.0;
                        }
                    }
                }
            }
        }
    }

    fn weigh(&self, freq: &mut [f32]) {
        let w = |j: usize| self.weights.get(j).copied().unwrap_or(1.0);
        for (j, f) in freq.iter_mut().enumerate() {
            *f = match self.mode {
                Mode::Tf => *f,
                Mode::Idf if *f > 0.0 => w(j),
                Mode::Idf => 0.0,
                Mode::TfIdf => w(j) * *f,
            };
        }
    }

    fn out_shape(&self, x: &[usize]) -> Result<Vec<usize>> {
        match x {
            [_] => Ok(vec![self.width]),
            [n, _] => Ok(vec![*n, self.width]),
            other => Err(Error::op(
                OP,
                format!("X must be [C] or [N, C], found {other:?}"),
            )),
        }
    }
}

impl Operator for TfIdfVectorizer {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(OP, inputs, 0)?;
        let ok = if self.strings {
            x.dtype == DType::String
        } else {
            matches!(x.dtype, DType::I32 | DType::I64)
        };
        if !ok {
            return Err(Error::op(
                OP,
                format!("X of type {} does not match the pool", x.dtype),
            ));
        }
        Ok(vec![match &x.shape {
            Some(s) => Fact::new(DType::F32, self.out_shape(s)?),
            None => Fact::unknown_shape(DType::F32),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        // A hash lookup (about 8 operations) per n-gram tried.
        let n = fact_len(inputs, 0);
        let tries = self.max_skip.saturating_add(1).min(n.max(1)) * self.max_len.min(n.max(1));
        (n as u64)
            .saturating_mul(tries as u64)
            .saturating_mul(8)
            .saturating_add(self.width as u64)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        let shape = self.out_shape(x.shape())?;
        budget::check("TfIdfVectorizer output", DType::F32, &shape)?;
        let ids = self.ids(x)?;
        let c = x.shape().last().copied().unwrap_or(0);
        let rows = if x.shape().len() == 2 {
            x.shape()[0]
        } else {
            1
        };
        let mut out = vec![0f32; rows * self.width];
        if self.width > 0 {
            for (r, freq) in out.chunks_mut(self.width).enumerate() {
                self.count_row(&ids[r * c..(r + 1) * c], freq);
                self.weigh(freq);
            }
        }
        Ok(vec![Tensor::from_vec(&shape, out)?])
    }
}

#[cfg(test)]
#[path = "tfidf_tests.rs"]
mod tests;
