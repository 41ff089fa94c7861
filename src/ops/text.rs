//! String operators: StringNormalizer (stop words and case), StringConcat
//! (elementwise with broadcasting), StringSplit (on a delimiter or on
//! whitespace, padded to a common count), RegexFullMatch (RE2 syntax through
//! the `regex` crate) and TfIdfVectorizer (n-gram counts over int or string
//! tokens, weighted as TF, IDF or TF-IDF).

use super::Registrar;
use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput};
use crate::tensor::{DType, Tensor};
use ndarray::ArrayViewD;

mod concat;
mod normalizer;
// The `regex` crate is an optional dependency that only `ops-text` enables;
// the catalog still lists RegexFullMatch when the family is left out.
#[cfg(feature = "ops-text")]
mod regex_match;
#[cfg(not(feature = "ops-text"))]
mod regex_match {
    use crate::error::{Error, Result};
    use crate::ir::{BuildContext, Operator};

    /// Never reached through the registry (the family is left out, so
    /// `ops::build` answers `OperatorLeftOut`); refuses if called directly.
    pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
        Err(Error::UnsupportedFeature {
            op: "RegexFullMatch".into(),
            feature: "this build (made without the ops-text feature)".into(),
        })
    }
}
mod split;
mod tfidf;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("StringNormalizer", 10, normalizer::build);
    r.add("StringConcat", 20, concat::build);
    r.add("StringSplit", 20, split::build);
    r.add("RegexFullMatch", 20, regex_match::build);
    r.add("TfIdfVectorizer", 9, tfidf::build);
}

/// Nominal bytes per string for cost estimates: facts do not know string
/// lengths, and a string operator's work grows with them.
const NOMINAL_LEN: u64 = 16;

/// The cost of touching every byte of `n` strings of nominal length.
pub(super) fn string_flops(n: usize) -> u64 {
    n as u64 * NOMINAL_LEN
}

/// The elements of a string tensor, or an error naming the operator.
pub(super) fn strings<'a>(op: &str, what: &str, t: &'a Tensor) -> Result<ArrayViewD<'a, String>> {
    match t {
        Tensor::String(a) => Ok(a.view()),
        other => Err(Error::op(
            op,
            format!("{what} must be a string tensor, found {}", other.dtype()),
        )),
    }
}

/// The fact of input `i`, which must be a string tensor.
pub(super) fn string_fact<'a>(
    op: &str,
    inputs: &[InferInput<'a>],
    i: usize,
    what: &str,
) -> Result<&'a Fact> {
    let f = super::util::fact(op, inputs, i)?;
    if f.dtype != DType::String {
        return Err(Error::op(
            op,
            format!("{what} must be a string tensor, found {}", f.dtype),
        ));
    }
    Ok(f)
}

/// The element count of an optional input fact (0 when unknown).
pub(super) fn fact_len(inputs: &[Option<&Fact>], i: usize) -> usize {
    inputs
        .get(i)
        .copied()
        .flatten()
        .and_then(|f| f.len())
        .unwrap_or(0)
}
