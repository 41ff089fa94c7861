//! Operators outside the other families: Einsum (general tensor contraction
//! over an index space) and CumProd (cumulative product along an axis).

use super::Registry;

mod cumprod;
mod einsum;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut Registry) {
    r.add("CumProd", 26, cumprod::build);
    r.add("Einsum", 12, einsum::build);
}
