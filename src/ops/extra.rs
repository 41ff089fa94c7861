//! Operators outside the other families: Einsum (general tensor contraction
//! over an index space), CumProd (cumulative product along an axis), Det,
//! ReverseSequence, Unique and Col2Im.

use super::Registrar;

mod col2im;
mod cumprod;
mod det;
mod einsum;
mod reverse_sequence;
#[cfg(test)]
mod tests;
mod unique;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("CumProd", 26, cumprod::build);
    r.add("Einsum", 12, einsum::build);
    r.add("Col2Im", 18, col2im::build);
    r.add("Det", 11, det::build);
    r.add("ReverseSequence", 10, reverse_sequence::build);
    r.add("Unique", 11, unique::build);
}
