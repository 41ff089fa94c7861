//! The narrow ONNX element types: five float8 formats, float4 (E2M1) and the
//! 4- and 2-bit integers. Each is a `Copy` newtype over one byte (one element
//! per byte in memory; packing happens only in TensorProto storage).
//!
//! Float conversions follow the ONNX spec (and ml_dtypes, which generates
//! its reference outputs): round to nearest, ties to even, from the exact
//! value (one rounding from f64). With `saturate`, out-of-range values and
//! infinities become the largest finite value of the sign; without it they
//! become infinity (E5M2) or NaN (E4M3FN and the FNUZ formats). NaN maps to
//! NaN; the FNUZ formats have a single NaN (0x80) and no negative zero.
//! FLOAT4E2M1 has neither infinity nor NaN: it always saturates, and NaN
//! becomes a zero of the opposite sign, as ml_dtypes does. The small
//! integers convert like other integers: floats truncate toward zero (NaN to
//! 0) and every value wraps to the type's width.
//!
//! FLOAT8E8M0 ([`F8E8M0`]) is a scale, not a float: the byte `e` is
//! 2^(e-127), from 2^-127 (0x00) to 2^127 (0xFE), with 0xFF NaN; no sign,
//! no zero, no infinity. A conversion to it picks a power of two by its
//! [`RoundMode`] (Cast's `round_mode`, opset 24) from the exact magnitude
//! (the sign is ignored: the spec leaves negative inputs unspecified, and
//! ONNX's reference reads only the exponent and mantissa bits). Rounding
//! up from 2^-127 or less (zero included) gives 2^-127. A value whose
//! power of two falls outside the range otherwise (past 2^127, infinities;
//! below 2^-127 rounding down or to nearest, zero included) becomes the
//! nearer end of the range with `saturate` and NaN without it, as the
//! spec's table has it; NaN stays NaN. For every normal f32, and for zero
//! with `saturate` or rounding up, this is bit for bit what ONNX's
//! reference (`numpy_helper.to_float8e8m0`) gives.

use std::fmt;

/// How a minifloat format spends its special encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    /// Only all-ones exponent and mantissa is NaN; no infinity (E4M3FN).
    FiniteNan,
    /// IEEE-like: all-ones exponent is infinity (mantissa 0) or NaN (E5M2).
    Ieee,
    /// One NaN at 0x80 (negative zero's encoding); no infinity (FNUZ).
    Fnuz,
    /// No NaN, no infinity (E2M1).
    Finite,
}

/// The layout of a minifloat: exponent and mantissa widths, bias, specials.
#[derive(Debug, Clone, Copy)]
struct Format {
    exp: u32,
    man: u32,
    bias: i32,
    special: Special,
    /// Largest finite value.
    max: f64,
}

impl Format {
    fn sign_bit(&self) -> u8 {
        1 << (self.exp + self.man)
    }

    fn nan(&self, negative: bool) -> u8 {
        let s = if negative { self.sign_bit() } else { 0 };
        match self.special {
            Special::FiniteNan => s | (self.sign_bit() - 1),
            Special::Ieee => s | (((1 << self.exp) - 1) << self.man) | (1 << (self.man - 1)),
            Special::Fnuz => 0x80,
            Special::Finite => self.sign_bit() ^ s,
        }
    }

    /// The encoding of a value past the largest finite one (after rounding).
    fn overflow(&self, negative: bool, saturate: bool) -> u8 {
        let s = if negative { self.sign_bit() } else { 0 };
        match self.special {
            _ if saturate => s | self.encode_finite(self.max),
            Special::Finite => s | self.encode_finite(self.max),
            Special::Ieee => s | (((1 << self.exp) - 1) << self.man),
            Special::FiniteNan | Special::Fnuz => self.nan(negative),
        }
    }

    /// The bits (without sign) of a non-negative value already on the grid.
    fn encode_finite(&self, m: f64) -> u8 {
        let emin = 1 - self.bias;
        if m < pow2(emin) {
            return (m / pow2(emin - self.man as i32)) as u8;
        }
        let e = exponent(m);
        let frac = m / pow2(e - self.man as i32) - pow2(self.man as i32);
        ((((e + self.bias) as u32) << self.man) | frac as u32) as u8
    }

    fn encode(&self, v: f64, saturate: bool) -> u8 {
        let negative = v.is_sign_negative();
        if v.is_nan() {
            return self.nan(negative);
        }
        let a = v.abs();
        if a.is_infinite() {
            return self.overflow(negative, saturate);
        }
        let emin = 1 - self.bias;
        let e = if a < pow2(emin) { emin } else { exponent(a) };
        let ulp = pow2(e - self.man as i32);
        let m = (a / ulp).round_ties_even() * ulp;
        if m > self.max {
            return self.overflow(negative, saturate);
        }
        if m == 0.0 && self.special == Special::Fnuz {
            return 0;
        }
        let s = if negative { self.sign_bit() } else { 0 };
        s | self.encode_finite(m)
    }

    fn decode(&self, bits: u8) -> f32 {
        let negative = bits & self.sign_bit() != 0;
        let mag = bits & (self.sign_bit() - 1);
        let e_field = (mag >> self.man) as i32;
        let frac = (mag & ((1 << self.man) - 1)) as f64;
        let all_ones = (1 << self.exp) - 1;
        match self.special {
            Special::FiniteNan if mag == self.sign_bit() - 1 => return f32::NAN,
            Special::Ieee if e_field == all_ones => {
                let v = if frac == 0.0 { f32::INFINITY } else { f32::NAN };
                return if negative { -v } else { v };
            }
            Special::Fnuz if bits == 0x80 => return f32::NAN,
            _ => {}
        }
        let m = if e_field == 0 {
            frac * pow2(1 - self.bias - self.man as i32)
        } else {
            (pow2(self.man as i32) + frac) * pow2(e_field - self.bias - self.man as i32)
        };
        let v = m as f32;
        if negative {
            -v
        } else {
            v
        }
    }
}

fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}

/// The unbiased binary exponent of a positive normal f64.
fn exponent(v: f64) -> i32 {
    ((v.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

const E4M3FN: Format = Format {
    exp: 4,
    man: 3,
    bias: 7,
    special: Special::FiniteNan,
    max: 448.0,
};
const E4M3FNUZ: Format = Format {
    exp: 4,
    man: 3,
    bias: 8,
    special: Special::Fnuz,
    max: 240.0,
};
const E5M2: Format = Format {
    exp: 5,
    man: 2,
    bias: 15,
    special: Special::Ieee,
    max: 57344.0,
};
const E5M2FNUZ: Format = Format {
    exp: 5,
    man: 2,
    bias: 16,
    special: Special::Fnuz,
    max: 57344.0,
};
const E2M1: Format = Format {
    exp: 2,
    man: 1,
    bias: 1,
    special: Special::Finite,
    max: 6.0,
};

macro_rules! minifloat {
    ($(#[$doc:meta])* $name:ident, $fmt:expr, $bits:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(u8);

        impl $name {
            /// The value with this encoding (only the low bits of a narrower format count).
            pub fn from_bits(b: u8) -> Self {
                $name(b & $bits)
            }
            /// The encoding.
            pub fn to_bits(self) -> u8 {
                self.0
            }
            /// The nearest value (ties to even); `saturate` clamps overflow
            /// and infinities to the largest finite value.
            pub fn from_f64(v: f64, saturate: bool) -> Self {
                $name($fmt.encode(v, saturate))
            }
            /// The exact value as f32.
            pub fn to_f32(self) -> f32 {
                $fmt.decode(self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:#04x})", self.to_f32(), self.0)
            }
        }

        /// Orders by value (NaN unordered); equality compares encodings.
        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                self.to_f32().partial_cmp(&other.to_f32())
            }
        }
    };
}

minifloat!(
    /// FLOAT8E4M3FN: 4 exponent bits, 3 mantissa bits, no infinity, NaN 0x7F/0xFF.
    F8E4M3FN, E4M3FN, 0xff
);
minifloat!(
    /// FLOAT8E4M3FNUZ: bias 8, no infinity, no negative zero, NaN 0x80.
    F8E4M3FNUZ, E4M3FNUZ, 0xff
);
minifloat!(
    /// FLOAT8E5M2: IEEE-like, with infinities and NaNs.
    F8E5M2, E5M2, 0xff
);
minifloat!(
    /// FLOAT8E5M2FNUZ: bias 16, no infinity, no negative zero, NaN 0x80.
    F8E5M2FNUZ, E5M2FNUZ, 0xff
);
minifloat!(
    /// FLOAT4E2M1: 2 exponent bits, 1 mantissa bit, finite only (max 6).
    F4E2M1, E2M1, 0x0f
);

/// How a conversion to [`F8E8M0`] picks a power of two (Cast's `round_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RoundMode {
    /// The smallest power of two not below the value (the default).
    #[default]
    Up,
    /// The largest power of two not above the value.
    Down,
    /// The nearer power of two; the midpoint 1.5·2^k goes up.
    Nearest,
}

impl RoundMode {
    /// The mode an ONNX `round_mode` attribute names (`up`, `down`,
    /// `nearest`), or `None`.
    pub fn from_name(name: &str) -> Option<RoundMode> {
        match name {
            "up" => Some(RoundMode::Up),
            "down" => Some(RoundMode::Down),
            "nearest" => Some(RoundMode::Nearest),
            _ => None,
        }
    }
}

/// FLOAT8E8M0: an unsigned power-of-two scale, 2^(bits-127); 0xFF is NaN.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct F8E8M0(u8);

impl F8E8M0 {
    /// The encoding of NaN.
    pub const NAN: F8E8M0 = F8E8M0(0xff);
    /// The largest value, 2^127.
    pub const MAX: F8E8M0 = F8E8M0(0xfe);
    /// The smallest value, 2^-127.
    pub const MIN: F8E8M0 = F8E8M0(0);

    /// The value with this encoding (every byte is one).
    pub fn from_bits(b: u8) -> Self {
        F8E8M0(b)
    }

    /// The encoding.
    pub fn to_bits(self) -> u8 {
        self.0
    }

    /// The power of two that `round` picks for |v| (see the module notes
    /// for the range ends and NaN).
    pub fn from_f64(v: f64, saturate: bool, round: RoundMode) -> Self {
        if v.is_nan() {
            return Self::NAN;
        }
        let out_of_range = |high: bool| match (saturate, high) {
            (false, _) => Self::NAN,
            (true, true) => Self::MAX,
            (true, false) => Self::MIN,
        };
        // Below the range: rounding up lands on the smallest value.
        let below = || match round {
            RoundMode::Up => Self::MIN,
            _ => out_of_range(false),
        };
        let a = v.abs();
        if a == 0.0 {
            return below();
        }
        if a.is_infinite() {
            return out_of_range(true);
        }
        let bits = a.to_bits();
        let field = (bits >> 52) as i64;
        let mantissa = bits & ((1u64 << 52) - 1);
        // f64 subnormals lie far below 2^-127: any exponent under -128 does.
        let (e, mantissa) = if field == 0 {
            (-1100, 1)
        } else {
            (field - 1023, mantissa)
        };
        let k = match round {
            RoundMode::Up => e + i64::from(mantissa != 0),
            RoundMode::Down => e,
            RoundMode::Nearest => e + i64::from(mantissa >= 1u64 << 51),
        };
        let biased = k + 127;
        if biased > 0xfe {
            out_of_range(true)
        } else if biased < 0 {
            below()
        } else {
            F8E8M0(biased as u8)
        }
    }

    /// The exact value as f32 (2^-127 is an f32 subnormal).
    pub fn to_f32(self) -> f32 {
        match self.0 {
            0xff => f32::NAN,
            0 => f32::from_bits(1 << 22),
            e => f32::from_bits(u32::from(e) << 23),
        }
    }
}

impl fmt::Debug for F8E8M0 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:#04x})", self.to_f32(), self.0)
    }
}

/// Orders by value (NaN unordered); equality compares encodings.
impl PartialOrd for F8E8M0 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.to_f32().partial_cmp(&other.to_f32())
    }
}

macro_rules! small_int {
    ($(#[$doc:meta])* $name:ident, $repr:ty, $bits:expr, $signed:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
        #[repr(transparent)]
        pub struct $name($repr);

        impl $name {
            /// The value of the low bits of `v` (two's complement for signed types).
            pub fn wrapping(v: i64) -> Self {
                let low = (v as u64 & ((1u64 << $bits) - 1)) as i64;
                let neg = $signed && low >= 1 << ($bits - 1);
                $name((if neg { low - (1 << $bits) } else { low }) as $repr)
            }
            /// The value from its stored bits (the low bits of a byte).
            pub fn from_bits(b: u8) -> Self {
                Self::wrapping(b as i64)
            }
            /// The stored bits.
            pub fn to_bits(self) -> u8 {
                (self.0 as u8) & ((1u8 << $bits) - 1)
            }
            /// The value.
            pub fn get(self) -> i64 {
                self.0 as i64
            }
            /// The float truncated toward zero (NaN to 0), then wrapped.
            pub fn from_f64(v: f64) -> Self {
                Self::wrapping(v as i64)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

small_int!(
    /// UINT4: 0 to 15.
    U4, u8, 4, false
);
small_int!(
    /// INT4: -8 to 7.
    I4, i8, 4, true
);
small_int!(
    /// UINT2: 0 to 3.
    U2, u8, 2, false
);
small_int!(
    /// INT2: -2 to 1.
    I2, i8, 2, true
);

#[cfg(test)]
mod tests;
