//! Known encodings from the ONNX float8 / float4 tables and ml_dtypes.

use super::*;

fn bits8(f: impl Fn(f64, bool) -> u8, vals: &[f64], sat: bool) -> Vec<u8> {
    vals.iter().map(|&v| f(v, sat)).collect()
}

const PROBES: [f64; 14] = [
    0.0,
    -0.0,
    1.0,
    448.0,
    464.0,  // tie between 448 and 480: even mantissa (448)
    479.99, // rounds to 480 (past E4M3FN's max)
    1e9,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    0.001953125,   // 2^-9: E4M3FN's smallest subnormal
    0.0009765625,  // 2^-10: tie between 0 and 2^-9, to even (0)
    0.00146484375, // 1.5 * 2^-10: rounds up to 2^-9
    0.3,
];

#[test]
fn e4m3fn_rounding_overflow_and_nan() {
    let f = |v, s| F8E4M3FN::from_f64(v, s).to_bits();
    assert_eq!(
        bits8(f, &PROBES, false),
        [0x00, 0x80, 0x38, 0x7e, 0x7e, 0x7f, 0x7f, 0x7f, 0xff, 0x7f, 0x01, 0x00, 0x01, 0x2a]
    );
    assert_eq!(
        bits8(f, &PROBES, true),
        [0x00, 0x80, 0x38, 0x7e, 0x7e, 0x7e, 0x7e, 0x7e, 0xfe, 0x7f, 0x01, 0x00, 0x01, 0x2a]
    );
    assert_eq!(F8E4M3FN::from_f64(-f64::NAN, true).to_bits(), 0xff);
    assert_eq!(F8E4M3FN::from_bits(0x7e).to_f32(), 448.0);
    assert_eq!(F8E4M3FN::from_bits(0x01).to_f32(), 2f32.powi(-9));
    assert_eq!(F8E4M3FN::from_bits(0x08).to_f32(), 2f32.powi(-6));
    assert!(F8E4M3FN::from_bits(0x7f).to_f32().is_nan());
    assert!(F8E4M3FN::from_bits(0xff).to_f32().is_nan());
    assert_eq!(
        F8E4M3FN::from_bits(0x80).to_f32().to_bits(),
        (-0f32).to_bits()
    );
}

#[test]
fn e4m3fnuz_has_one_nan_and_no_negative_zero() {
    let f = |v, s| F8E4M3FNUZ::from_f64(v, s).to_bits();
    assert_eq!(
        bits8(f, &PROBES, false),
        [0x00, 0x00, 0x40, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 0x01, 0x02, 0x32]
    );
    assert_eq!(F8E4M3FNUZ::from_f64(1e9, true).to_bits(), 0x7f);
    assert_eq!(F8E4M3FNUZ::from_f64(-1e9, true).to_bits(), 0xff);
    assert_eq!(F8E4M3FNUZ::from_f64(-1e-30, false).to_bits(), 0x00);
    assert_eq!(F8E4M3FNUZ::from_bits(0x7f).to_f32(), 240.0);
    assert!(F8E4M3FNUZ::from_bits(0x80).to_f32().is_nan());
}

#[test]
fn e5m2_keeps_infinities() {
    let f = |v, s| F8E5M2::from_f64(v, s).to_bits();
    let vals = [
        57344.0,
        61439.0,
        61440.0,
        f64::INFINITY,
        f64::NAN,
        2f64.powi(-16),
        0.3,
    ];
    assert_eq!(
        bits8(f, &vals, false),
        [0x7b, 0x7b, 0x7c, 0x7c, 0x7e, 0x01, 0x35]
    );
    assert_eq!(
        bits8(f, &vals, true),
        [0x7b, 0x7b, 0x7b, 0x7b, 0x7e, 0x01, 0x35]
    );
    assert_eq!(F8E5M2::from_f64(-f64::INFINITY, false).to_bits(), 0xfc);
    assert_eq!(F8E5M2::from_f64(-f64::INFINITY, true).to_bits(), 0xfb);
    assert_eq!(F8E5M2::from_bits(0xfc).to_f32(), f32::NEG_INFINITY);
    assert!(F8E5M2::from_bits(0x7d).to_f32().is_nan());
    assert_eq!(F8E5M2::from_bits(0x7b).to_f32(), 57344.0);
}

#[test]
fn e5m2fnuz() {
    let f = |v, s| F8E5M2FNUZ::from_f64(v, s).to_bits();
    let vals = [1.0, 448.0, 61440.0, f64::INFINITY, f64::NAN, -0.0, 0.3];
    assert_eq!(
        bits8(f, &vals, false),
        [0x40, 0x63, 0x80, 0x80, 0x80, 0x00, 0x39]
    );
    assert_eq!(
        bits8(f, &vals, true),
        [0x40, 0x63, 0x7f, 0x7f, 0x80, 0x00, 0x39]
    );
    assert_eq!(F8E5M2FNUZ::from_bits(0x7f).to_f32(), 57344.0);
    assert_eq!(F8E5M2FNUZ::from_bits(0x01).to_f32(), 2f32.powi(-17));
}

#[test]
fn e2m1_saturates_and_maps_nan_to_zero() {
    let f = |v| F4E2M1::from_f64(v, false).to_bits();
    let vals = [
        0.48,
        0.25,
        1.05,
        -3.5,
        -8.0,
        9.0,
        1e6,
        1e-7,
        f64::NAN,
        f64::INFINITY,
    ];
    let got: Vec<u8> = vals.iter().map(|&v| f(v)).collect();
    assert_eq!(got, [0x1, 0x0, 0x2, 0xe, 0xf, 0x7, 0x7, 0x0, 0x8, 0x7]);
    assert_eq!(f(-f64::NAN), 0x0);
    let all: Vec<f32> = (0..16).map(|b| F4E2M1::from_bits(b).to_f32()).collect();
    assert_eq!(
        all[..8],
        [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0],
        "the E2M1 table"
    );
    assert_eq!(all[15], -6.0);
    assert_eq!(F4E2M1::from_bits(0xf7).to_bits(), 0x7, "high bits ignored");
}

#[test]
fn every_encoding_round_trips() {
    type Codec = (fn(u8) -> f32, fn(f64) -> u8, u16);
    let codecs: [Codec; 5] = [
        (
            |b| F8E4M3FN::from_bits(b).to_f32(),
            |v| F8E4M3FN::from_f64(v, false).to_bits(),
            256,
        ),
        (
            |b| F8E4M3FNUZ::from_bits(b).to_f32(),
            |v| F8E4M3FNUZ::from_f64(v, false).to_bits(),
            256,
        ),
        (
            |b| F8E5M2::from_bits(b).to_f32(),
            |v| F8E5M2::from_f64(v, false).to_bits(),
            256,
        ),
        (
            |b| F8E5M2FNUZ::from_bits(b).to_f32(),
            |v| F8E5M2FNUZ::from_f64(v, false).to_bits(),
            256,
        ),
        (
            |b| F4E2M1::from_bits(b).to_f32(),
            |v| F4E2M1::from_f64(v, false).to_bits(),
            16,
        ),
    ];
    for (k, (dec, enc, n)) in codecs.iter().enumerate() {
        let mut nans = 0;
        for b in 0..*n {
            let b = b as u8;
            let v = dec(b);
            if v.is_nan() {
                nans += 1;
                continue;
            }
            assert_eq!(enc(v as f64), b, "format {k}: {b:#04x} decodes to {v}");
        }
        assert_eq!(nans, [2, 1, 6, 1, 0][k], "format {k} NaN count");
    }
}

#[test]
fn small_ints_wrap_and_truncate() {
    let i4: Vec<i64> = [-9.0, -8.0, 7.0, 8.0, 15.0, 2.7, -2.7, f64::NAN]
        .iter()
        .map(|&v| I4::from_f64(v).get())
        .collect();
    assert_eq!(i4, [7, -8, 7, -8, -1, 2, -2, 0]);
    let u4: Vec<i64> = [-1, 16, 17, 15]
        .iter()
        .map(|&v| U4::wrapping(v).get())
        .collect();
    assert_eq!(u4, [15, 0, 1, 15]);
    let i2: Vec<i64> = [-3, -2, 1, 2, 3]
        .iter()
        .map(|&v| I2::wrapping(v).get())
        .collect();
    assert_eq!(i2, [1, -2, 1, -2, -1]);
    let u2: Vec<i64> = [-3, -1, 4].iter().map(|&v| U2::wrapping(v).get()).collect();
    assert_eq!(u2, [1, 3, 0]);
    assert_eq!(I4::from_bits(0x0f).get(), -1);
    assert_eq!(I4::wrapping(-1).to_bits(), 0x0f);
    assert_eq!(I2::wrapping(-2).to_bits(), 0b10);
}

const MODES: [RoundMode; 3] = [RoundMode::Up, RoundMode::Down, RoundMode::Nearest];

fn e8m0(v: f64, saturate: bool, round: RoundMode) -> u8 {
    F8E8M0::from_f64(v, saturate, round).to_bits()
}

/// Every encoding decodes to 2^(e-127) (0xFF to NaN) and, in every mode
/// and with or without saturation, encodes back to itself.
#[test]
fn e8m0_every_encoding_round_trips() {
    for b in 0..=255u8 {
        let v = F8E8M0::from_bits(b).to_f32();
        if b == 0xff {
            assert!(v.is_nan());
        } else {
            assert_eq!(v as f64, 2f64.powi(b as i32 - 127), "{b:#04x}");
        }
        for round in MODES {
            for sat in [false, true] {
                assert_eq!(e8m0(v as f64, sat, round), b, "{b:#04x} {round:?} {sat}");
            }
        }
    }
    assert_eq!(F8E8M0::from_bits(0).to_f32().to_bits(), 0x0040_0000);
    assert_eq!(F8E8M0::from_bits(0x7f).to_f32(), 1.0);
    assert_eq!(F8E8M0::from_bits(0xfe).to_f32(), 2f32.powi(127));
    assert_eq!(F8E8M0::default(), F8E8M0::MIN);
}

#[test]
fn e8m0_rounding_modes_at_ties_and_between() {
    let at = |v: f64| MODES.map(|m| e8m0(v, true, m));
    // [up, down, nearest]
    assert_eq!(at(1.0), [0x7f, 0x7f, 0x7f]);
    assert_eq!(at(1.5), [0x80, 0x7f, 0x80], "the midpoint goes up");
    assert_eq!(at(1.5 - 1e-12), [0x80, 0x7f, 0x7f]);
    assert_eq!(at(1.0 + 1e-12), [0x80, 0x7f, 0x7f]);
    assert_eq!(at(2.0 - 1e-12), [0x80, 0x7f, 0x80]);
    assert_eq!(at(0.124), [0x7c, 0x7b, 0x7c]);
    assert_eq!(at(0.75), [0x7f, 0x7e, 0x7f]);
    assert_eq!(at(3.0 * 2f64.powi(-10)), [0x77, 0x76, 0x77]);
    // The sign is ignored (negative inputs are unspecified).
    assert_eq!(at(-4.0), [0x81, 0x81, 0x81]);
    assert_eq!(at(-1.5), at(1.5));
}

#[test]
fn e8m0_extremes_nan_and_saturation() {
    let nan = 0xff;
    let big = 1.5 * 2f64.powi(127);
    for round in MODES {
        // NaN is NaN whatever the flags.
        assert_eq!(e8m0(f64::NAN, true, round), nan);
        assert_eq!(e8m0(-f64::NAN, false, round), nan);
        // Infinities and zeros are outside the range: its ends with
        // saturation, NaN without.
        assert_eq!(e8m0(f64::INFINITY, true, round), 0xfe);
        assert_eq!(e8m0(f64::NEG_INFINITY, true, round), 0xfe);
        assert_eq!(e8m0(f64::INFINITY, false, round), nan);
        assert_eq!(e8m0(0.0, true, round), 0x00);
        assert_eq!(e8m0(-0.0, true, round), 0x00);
        let low = if round == RoundMode::Up { 0x00 } else { nan };
        assert_eq!(e8m0(0.0, false, round), low);
        assert_eq!(e8m0(1e-300, false, round), low);
        // 2^127 and 2^-127 are the ends, exactly.
        assert_eq!(e8m0(2f64.powi(127), false, round), 0xfe);
        assert_eq!(e8m0(2f64.powi(-127), false, round), 0x00);
        // Far outside: the ends, or NaN.
        assert_eq!(e8m0(1e300, true, round), 0xfe);
        assert_eq!(e8m0(1e300, false, round), nan);
        assert_eq!(e8m0(1e-300, true, round), 0x00);
        assert_eq!(e8m0(f64::from_bits(1), true, round), 0x00, "f64 subnormal");
    }
    // Just past 2^127: up leaves the range, down does not.
    assert_eq!(e8m0(big, true, RoundMode::Up), 0xfe);
    assert_eq!(e8m0(big, false, RoundMode::Up), nan);
    assert_eq!(e8m0(big, false, RoundMode::Down), 0xfe);
    assert_eq!(e8m0(big, false, RoundMode::Nearest), nan);
    assert_eq!(e8m0(1.2 * 2f64.powi(127), false, RoundMode::Nearest), 0xfe);
    assert_eq!(e8m0(f32::MAX as f64, true, RoundMode::Nearest), 0xfe);
    assert_eq!(e8m0(f32::MAX as f64, false, RoundMode::Down), 0xfe);
    // f32 subnormals (below 2^-126): by their exact value.
    let sub = |bits: u32| f32::from_bits(bits) as f64;
    assert_eq!(e8m0(sub(0x0040_0000), false, RoundMode::Up), 0x00, "2^-127");
    assert_eq!(e8m0(sub(0x0060_0000), false, RoundMode::Up), 0x01);
    assert_eq!(e8m0(sub(0x0060_0000), false, RoundMode::Down), 0x00);
    assert_eq!(e8m0(sub(0x0060_0000), false, RoundMode::Nearest), 0x01);
    assert_eq!(
        e8m0(sub(0x0000_0001), false, RoundMode::Up),
        0x00,
        "2^-149 up"
    );
    assert_eq!(e8m0(sub(0x0000_0001), false, RoundMode::Down), nan);
    assert_eq!(e8m0(sub(0x0000_0001), true, RoundMode::Down), 0x00);
    // 2^-128 rounds (to itself) below the range; 1.5 · 2^-128 up into it.
    assert_eq!(e8m0(2f64.powi(-128), false, RoundMode::Nearest), nan);
    assert_eq!(e8m0(2f64.powi(-128), true, RoundMode::Nearest), 0x00);
    assert_eq!(e8m0(1.5 * 2f64.powi(-128), false, RoundMode::Nearest), 0x00);
    assert_eq!(e8m0(2f64.powi(-128), false, RoundMode::Up), 0x00);
}

/// ONNX's reference (`numpy_helper.to_float8e8m0`) works on an f32's
/// exponent and mantissa bits; restated here, it agrees with the exact
/// rounding on every normal f32 (sampled across all exponents).
#[test]
fn e8m0_matches_onnx_reference_bit_rules_on_normal_f32() {
    fn reference(bits: u32, saturate: bool, round: RoundMode) -> u8 {
        let exp = (bits >> 23) & 0xff;
        let up = match round {
            RoundMode::Up => bits & 0x7f_ffff != 0,
            RoundMode::Down => false,
            RoundMode::Nearest => bits & 0x40_0000 != 0,
        };
        let up = up && !(saturate && exp == 0xfe);
        (exp + u32::from(up)) as u8
    }
    let mut checked = 0;
    let mut bits: u32 = 0x0080_0000;
    while bits < 0x7f80_0000 {
        for sign in [0, 0x8000_0000] {
            let x = f32::from_bits(bits | sign) as f64;
            for round in MODES {
                for sat in [false, true] {
                    let want = reference(bits, sat, round);
                    assert_eq!(e8m0(x, sat, round), want, "{bits:#010x} {round:?} {sat}");
                    checked += 1;
                }
            }
        }
        bits += 0x1357;
    }
    assert!(checked > 1_000_000);
    // Zero with saturation or rounding up: the reference's 0x00 as well.
    for round in MODES {
        assert_eq!(e8m0(0.0, true, round), reference(0, true, round));
    }
    assert_eq!(
        e8m0(0.0, false, RoundMode::Up),
        reference(0, false, RoundMode::Up)
    );
}

#[test]
fn round_mode_names() {
    assert_eq!(RoundMode::from_name("up"), Some(RoundMode::Up));
    assert_eq!(RoundMode::from_name("down"), Some(RoundMode::Down));
    assert_eq!(RoundMode::from_name("nearest"), Some(RoundMode::Nearest));
    assert_eq!(RoundMode::from_name("UP"), None);
    assert_eq!(RoundMode::from_name(""), None);
    assert_eq!(RoundMode::default(), RoundMode::Up);
}
