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
