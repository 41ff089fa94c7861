//! Matrix products on the int8 engine: the left operand A (`[m][k]`, or
//! `[k][m]` transposed) supplies C's columns, a packed right operand B its
//! rows, and the result lands as `[m][n]` (C transposed on store).

use super::panel::{flip_mask, pack_columns, pack_k_rows};
use super::{FloatSink, PackedS8, PanelSource, Product, Sink, WideSink};

/// The u8 side of `A · B`: A's rows as C's columns.
pub(crate) struct LeftOperand<'a> {
    /// A's raw bytes.
    pub a: &'a [u8],
    /// Rows of A' (A after the optional transposition).
    pub m: usize,
    /// Columns of A'.
    pub k: usize,
    /// A is stored `[k][m]`.
    pub trans: bool,
    /// A holds s8 values.
    pub signed: bool,
}

impl PanelSource for LeftOperand<'_> {
    fn pack(&self, panel: &mut [u8], c0: usize, n: usize) {
        let flip = flip_mask(self.signed);
        if self.trans {
            pack_k_rows(panel, self.a, self.k, self.m, (c0, n), flip);
        } else {
            pack_columns(panel, self.a, self.k, self.k, (c0, n), flip);
        }
    }
}

/// Packs B (`[k][n]`, or `[n][k]` when `trans`) with its zero point (one,
/// or one per column n) as the engine's s8 operand.
pub(crate) fn pack_right(
    b: &[u8],
    k: usize,
    n: usize,
    trans: bool,
    signed: bool,
    zero: &[i32],
) -> PackedS8 {
    let strides = if trans { (k, 1) } else { (1, n) };
    PackedS8::pack(b, n, k, strides, !signed, zero)
}

/// `(A − za) · (B − zb)` as i32 `[m][n]`, exact, into `out` (`m·n`
/// elements, every one written).
pub(crate) fn product_into(a: &LeftOperand, zero_a: i32, b: &PackedS8, out: &mut [i32]) {
    product_of(a, zero_a, b, None).run(a, &WideSink::new(out, (1, b.rows)));
}

/// `f32((A − za) · (B − zb)) · scale[j] + bias[j]` into `out` (`[m][n]`,
/// every element written): `scale` one value or one per column of B, the
/// bias optional and one per column (see [`FloatSink`] for the rounding).
pub(crate) fn product_scaled_into(
    a: &LeftOperand,
    zero_a: i32,
    b: &PackedS8,
    out: &mut [f32],
    (scale, bias): (&[f32], Option<&[f32]>),
) {
    let sink = FloatSink::new(out, (1, b.rows), scale, bias);
    product_of(a, zero_a, b, None).run(a, &sink);
}

/// `(A − za) · (B − zb) + bias[j]` (one i32 per column j of B) handed to
/// `sink` as C transposed: the sink's rows are B's columns, its columns
/// A's rows, so `[m][n]` output takes strides `(1, n)`.
pub(crate) fn product_to_sink(
    a: &LeftOperand,
    zero_a: i32,
    b: &PackedS8,
    bias: Option<&[i32]>,
    sink: &dyn Sink,
) {
    product_of(a, zero_a, b, bias).run(a, sink);
}

/// The engine's product for `A · B` (A's rows as C's columns).
fn product_of<'a>(
    a: &LeftOperand,
    zero_a: i32,
    b: &'a PackedS8,
    bias: Option<&'a [i32]>,
) -> Product<'a> {
    Product {
        w: b,
        cols: a.m,
        zero_x: zero_a + if a.signed { 128 } else { 0 },
        bias,
    }
}
