//! Broadcasting comparisons (Equal, Less, Greater, LessOrEqual,
//! GreaterOrEqual), boolean logic (And, Or, Xor), integer bit operations
//! (BitwiseAnd/Or/Xor, BitShift) and Where.

use super::broadcast::{zip2, zip3};
use super::{infer_types, type_error};
use crate::error::{Error, Result};
use crate::ir::{Fact, InferInput, Operator};
use crate::ops::unary::kernel::contiguous;
use crate::ops::util::{fact, input, out_len};
use crate::tensor::widths::{by_width, same_width, Bits, WidthVec};
use crate::tensor::{DType, Tensor};
use ndarray::ArrayD;

/// Matches two tensors of the same type (any type), binding their arrays.
macro_rules! same_any {
    ($op:expr, $a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        match ($a, $b) {
            (Tensor::F32($x), Tensor::F32($y)) => $body,
            (Tensor::F64($x), Tensor::F64($y)) => $body,
            (Tensor::F16($x), Tensor::F16($y)) => $body,
            (Tensor::BF16($x), Tensor::BF16($y)) => $body,
            (Tensor::I8($x), Tensor::I8($y)) => $body,
            (Tensor::I16($x), Tensor::I16($y)) => $body,
            (Tensor::I32($x), Tensor::I32($y)) => $body,
            (Tensor::I64($x), Tensor::I64($y)) => $body,
            (Tensor::U8($x), Tensor::U8($y)) => $body,
            (Tensor::U16($x), Tensor::U16($y)) => $body,
            (Tensor::U32($x), Tensor::U32($y)) => $body,
            (Tensor::U64($x), Tensor::U64($y)) => $body,
            (Tensor::Bool($x), Tensor::Bool($y)) => $body,
            (Tensor::String($x), Tensor::String($y)) => $body,
            (a, b) => return Err(type_error($op, a.dtype(), b.dtype())),
        }
    };
}

/// Which comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpKind {
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
}

impl CmpKind {
    /// The orderings this comparison is true for, as a mask of
    /// [`order_bit`]s.
    fn mask(self) -> u8 {
        match self {
            CmpKind::Equal => EQ,
            CmpKind::Less => LT,
            CmpKind::Greater => GT,
            CmpKind::LessOrEqual => LT | EQ,
            CmpKind::GreaterOrEqual => GT | EQ,
        }
    }
}

const LT: u8 = 1;
const EQ: u8 = 2;
const GT: u8 = 4;

/// How `x` and `y` are ordered, as one bit (0 when they are unordered:
/// a NaN). `x <= y` is `x < y || x == y` for every element type, so one
/// ordering answers all five comparisons.
#[inline(always)]
fn order_bit<T: PartialOrd>(x: &T, y: &T) -> u8 {
    match x.partial_cmp(y) {
        Some(std::cmp::Ordering::Less) => LT,
        Some(std::cmp::Ordering::Equal) => EQ,
        Some(std::cmp::Ordering::Greater) => GT,
        None => 0,
    }
}

/// The comparison `kind` elementwise. The kind is a mask tested per
/// element, so each element type compiles one kernel for all five
/// comparisons, not one per comparison.
fn compare<T: PartialOrd + Clone + Sync + 'static>(
    op: &str,
    kind: CmpKind,
    a: &ArrayD<T>,
    b: &ArrayD<T>,
) -> Result<ArrayD<bool>> {
    let want = kind.mask();
    zip2(op, a, b, move |x, y| order_bit(x, y) & want != 0)
}

/// A comparison producing bool.
#[derive(Debug)]
pub(crate) struct Compare {
    pub name: &'static str,
    pub kind: CmpKind,
}

impl Compare {
    fn accepts(&self, d: DType) -> bool {
        match self.kind {
            CmpKind::Equal => true,
            _ => super::arith::is_numeric(d),
        }
    }
}

impl Operator for Compare {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        infer_types(self.name, inputs, 2, |d| self.accepts(d), Some(DType::Bool))
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name;
        let a = input(op, inputs, 0)?;
        let b = input(op, inputs, 1)?;
        if !self.accepts(a.dtype()) {
            return Err(type_error(op, a.dtype(), b.dtype()));
        }
        let r = same_any!(op, a, b, |x, y| compare(op, self.kind, x, y)?);
        Ok(vec![Tensor::Bool(r)])
    }
}

/// Which bit or boolean operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BitKind {
    And,
    Or,
    Xor,
}

/// And/Or/Xor on bool (`logical`) or on integers (BitwiseAnd/Or/Xor).
#[derive(Debug)]
pub(crate) struct Bitwise {
    pub name: &'static str,
    pub kind: BitKind,
    pub logical: bool,
}

fn bits<T>(op: &str, kind: BitKind, a: &ArrayD<T>, b: &ArrayD<T>) -> Result<ArrayD<T>>
where
    T: Copy
        + Default
        + Send
        + Sync
        + std::ops::BitAnd<Output = T>
        + std::ops::BitXor<Output = T>
        + std::ops::Not<Output = T>
        + 'static,
{
    // One kernel per type for all three operations, without a branch the
    // compiler would unswitch into three loops again: `x | y` is
    // `(x & y) ^ (x ^ y)`, so masking the two terms picks the operation.
    let (none, all) = (T::default(), !T::default());
    let (keep_and, keep_xor) = match kind {
        BitKind::And => (all, none),
        BitKind::Or => (all, all),
        BitKind::Xor => (none, all),
    };
    zip2(op, a, b, move |&x, &y| {
        ((x & y) & keep_and) ^ ((x ^ y) & keep_xor)
    })
}

fn is_int(d: DType) -> bool {
    super::arith::is_numeric(d) && !d.is_float()
}

impl Bitwise {
    fn accepts(&self, d: DType) -> bool {
        if self.logical {
            d == DType::Bool
        } else {
            is_int(d)
        }
    }
}

impl Operator for Bitwise {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        infer_types(self.name, inputs, 2, |d| self.accepts(d), None)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = self.name;
        let a = input(op, inputs, 0)?;
        let b = input(op, inputs, 1)?;
        if !self.accepts(a.dtype()) {
            return Err(type_error(op, a.dtype(), b.dtype()));
        }
        let k = self.kind;
        let out = match (a, b) {
            (Tensor::Bool(x), Tensor::Bool(y)) => Tensor::Bool(bits(op, k, x, y)?),
            (Tensor::I8(x), Tensor::I8(y)) => Tensor::I8(bits(op, k, x, y)?),
            (Tensor::I16(x), Tensor::I16(y)) => Tensor::I16(bits(op, k, x, y)?),
            (Tensor::I32(x), Tensor::I32(y)) => Tensor::I32(bits(op, k, x, y)?),
            (Tensor::I64(x), Tensor::I64(y)) => Tensor::I64(bits(op, k, x, y)?),
            (Tensor::U8(x), Tensor::U8(y)) => Tensor::U8(bits(op, k, x, y)?),
            (Tensor::U16(x), Tensor::U16(y)) => Tensor::U16(bits(op, k, x, y)?),
            (Tensor::U32(x), Tensor::U32(y)) => Tensor::U32(bits(op, k, x, y)?),
            (Tensor::U64(x), Tensor::U64(y)) => Tensor::U64(bits(op, k, x, y)?),
            (x, y) => return Err(type_error(op, x.dtype(), y.dtype())),
        };
        Ok(vec![out])
    }
}

/// BitShift on integers; shifting left by the bit width or more (or by a
/// negative amount) gives 0, shifting right that far fills with the sign bit
/// (signed types are accepted from opset 28 on, as ONNX's tests expect).
#[derive(Debug)]
pub(crate) struct BitShift {
    pub left: bool,
    /// Signed integer types are allowed (opset 28 on).
    pub signed: bool,
}

macro_rules! shift {
    ($op:expr, $left:expr, $x:expr, $y:expr, $t:ty) => {{
        const BITS: $t = <$t>::BITS as $t;
        if $left {
            zip2($op, $x, $y, |&v, &s| if s >= BITS { 0 } else { v << s })?
        } else {
            zip2($op, $x, $y, |&v, &s| if s >= BITS { 0 } else { v >> s })?
        }
    }};
}

macro_rules! signed_shift {
    ($op:expr, $left:expr, $x:expr, $y:expr, $t:ty) => {{
        const BITS: $t = <$t>::BITS as $t;
        let far = |s: $t| !(0..BITS).contains(&s);
        if $left {
            zip2($op, $x, $y, |&v, &s| if far(s) { 0 } else { v << s })?
        } else {
            zip2(
                $op,
                $x,
                $y,
                |&v, &s| if far(s) { v >> (BITS - 1) } else { v >> s },
            )?
        }
    }};
}

impl Operator for BitShift {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let signed = self.signed;
        let integer = |d| {
            matches!(d, DType::U8 | DType::U16 | DType::U32 | DType::U64)
                || (signed && matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64))
        };
        infer_types("BitShift", inputs, 2, integer, None)
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = "BitShift";
        let a = input(op, inputs, 0)?;
        let b = input(op, inputs, 1)?;
        let l = self.left;
        if !self.signed && !matches!(a.dtype(), DType::U8 | DType::U16 | DType::U32 | DType::U64) {
            return Err(type_error(op, a.dtype(), b.dtype()));
        }
        let out = match (a, b) {
            (Tensor::U8(x), Tensor::U8(y)) => Tensor::U8(shift!(op, l, x, y, u8)),
            (Tensor::U16(x), Tensor::U16(y)) => Tensor::U16(shift!(op, l, x, y, u16)),
            (Tensor::U32(x), Tensor::U32(y)) => Tensor::U32(shift!(op, l, x, y, u32)),
            (Tensor::U64(x), Tensor::U64(y)) => Tensor::U64(shift!(op, l, x, y, u64)),
            (Tensor::I8(x), Tensor::I8(y)) => Tensor::I8(signed_shift!(op, l, x, y, i8)),
            (Tensor::I16(x), Tensor::I16(y)) => Tensor::I16(signed_shift!(op, l, x, y, i16)),
            (Tensor::I32(x), Tensor::I32(y)) => Tensor::I32(signed_shift!(op, l, x, y, i32)),
            (Tensor::I64(x), Tensor::I64(y)) => Tensor::I64(signed_shift!(op, l, x, y, i64)),
            (x, y) => return Err(type_error(op, x.dtype(), y.dtype())),
        };
        Ok(vec![out])
    }
}

/// Where(condition, X, Y) with three-way broadcasting.
#[derive(Debug)]
pub(crate) struct Where;

/// Where on elements of one width (bits or strings): it only moves
/// elements, so it is compiled once per width, not once per element type.
fn select<B: Bits>(
    shapes: [&[usize]; 3],
    c: &[bool],
    x: &[B],
    y: Option<&[B]>,
) -> Result<(Vec<usize>, WidthVec)> {
    let y = y.ok_or_else(|| Error::op("Where", "X and Y must have one type"))?;
    let (shape, out) = zip3("Where", shapes, c, x, y, |&c, x, y| {
        if c {
            x.clone()
        } else {
            y.clone()
        }
    })?;
    Ok((shape, B::vec(out)))
}

impl Operator for Where {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let op = "Where";
        let c = fact(op, inputs, 0)?;
        if c.dtype != DType::Bool {
            return Err(Error::op(
                op,
                format!("condition must be bool, found {}", c.dtype),
            ));
        }
        let x = fact(op, inputs, 1)?;
        let y = fact(op, inputs, 2)?;
        if x.dtype != y.dtype {
            return Err(type_error(op, x.dtype, y.dtype));
        }
        let shape = match (&c.shape, &x.shape, &y.shape) {
            (Some(a), Some(b), Some(d)) => Some(crate::ops::util::broadcast_all(op, &[a, b, d])?),
            _ => None,
        };
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: x.dtype,
            shape,
        }])
    }

    fn flops(&self, _inputs: &[Option<&Fact>], outputs: &[Fact]) -> u64 {
        out_len(outputs, 0)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let op = "Where";
        let c = input(op, inputs, 0)?;
        let c = c
            .array::<bool>()
            .ok_or_else(|| Error::op(op, format!("condition must be bool, found {}", c.dtype())))?;
        let x = input(op, inputs, 1)?;
        let y = input(op, inputs, 2)?;
        if x.dtype() != y.dtype() {
            return Err(type_error(op, x.dtype(), y.dtype()));
        }
        let shapes = [c.shape(), x.shape(), y.shape()];
        let cs = contiguous(c);
        let wy = y.width();
        let (shape, v) = by_width!(x, sx => select(shapes, &cs, sx, same_width(sx, &wy))?);
        let out = Tensor::from_width(op, x.dtype(), &shape, v)?;
        Ok(vec![out])
    }
}
