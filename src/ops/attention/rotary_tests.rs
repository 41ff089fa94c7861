//! RotaryEmbedding tests: a naive f64 rotation (both layouts, halves and
//! interleaved pairs, partial rotation, with and without position ids,
//! broadcast ids and caches), f16 rounding, empty inputs and the errors.

use crate::ir::attributes::Attribute;
use crate::ir::Operator;
use crate::ops::attention::support::testing::{build, close, data, message, run, t};
use crate::tensor::Tensor;
use half::f16;

fn op(attrs: Vec<(&str, Attribute)>, inputs: usize) -> Box<dyn Operator> {
    build("", "RotaryEmbedding", 23, attrs, inputs, 1).unwrap()
}

/// Sizes of a naive case: batch, seq, heads, head size, rotated features.
#[derive(Clone, Copy)]
struct Case {
    b: usize,
    s: usize,
    h: usize,
    d: usize,
    rot: usize,
    interleaved: bool,
    /// `[batch, heads, seq, head]` (else `[batch, seq, heads·head]`).
    four_d: bool,
}

/// The rotation in f64; `angle(b, s)` gives the cache row for (b, s).
fn naive(
    c: Case,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    row: impl Fn(usize, usize) -> usize,
) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let half = c.rot / 2;
    for b in 0..c.b {
        for s in 0..c.s {
            for h in 0..c.h {
                let base = if c.four_d {
                    ((b * c.h + h) * c.s + s) * c.d
                } else {
                    ((b * c.s + s) * c.h + h) * c.d
                };
                let cr = row(b, s) * half;
                for i in 0..half {
                    let (i1, i2) = if c.interleaved {
                        (2 * i, 2 * i + 1)
                    } else {
                        (i, i + half)
                    };
                    let (x1, x2) = (x[base + i1] as f64, x[base + i2] as f64);
                    let (co, si) = (cos[cr + i] as f64, sin[cr + i] as f64);
                    out[base + i1] = co * x1 - si * x2;
                    out[base + i2] = si * x1 + co * x2;
                }
            }
        }
    }
    out
}

fn shape(c: Case) -> Vec<usize> {
    if c.four_d {
        vec![c.b, c.h, c.s, c.d]
    } else {
        vec![c.b, c.s, c.h * c.d]
    }
}

fn attrs(c: Case) -> Vec<(&'static str, Attribute)> {
    let mut a = vec![("interleaved", Attribute::Int(c.interleaved as i64))];
    if c.rot != c.d {
        a.push(("rotary_embedding_dim", Attribute::Int(c.rot as i64)));
    }
    if !c.four_d {
        a.push(("num_heads", Attribute::Int(c.h as i64)));
    }
    a
}

#[test]
fn matches_naive_with_position_ids() {
    for four_d in [true, false] {
        for interleaved in [false, true] {
            for rot in [8, 4, 2] {
                let c = Case {
                    b: 2,
                    s: 3,
                    h: 2,
                    d: 8,
                    rot,
                    interleaved,
                    four_d,
                };
                let x = data(c.b * c.s * c.h * c.d, 1);
                let (cos, sin) = (data(10 * rot / 2, 2), data(10 * rot / 2, 3));
                let ids: Vec<i64> = vec![0, 4, 9, 2, 2, 7];
                let want = naive(c, &x, &cos, &sin, |b, s| ids[b * c.s + s] as usize);
                let ins = [
                    t(&shape(c), x),
                    t(&[10, rot / 2], cos),
                    t(&[10, rot / 2], sin),
                    Tensor::from_vec(&[2, 3], ids.clone()).unwrap(),
                ];
                let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
                let got = run(op(attrs(c), 4).as_ref(), &refs).unwrap();
                close(&got[0], &want, 1e-6);
            }
        }
    }
}

#[test]
fn matches_naive_without_position_ids() {
    let c = Case {
        b: 2,
        s: 4,
        h: 3,
        d: 6,
        rot: 4,
        interleaved: true,
        four_d: true,
    };
    let x = data(2 * 4 * 3 * 6, 4);
    let (cos, sin) = (data(2 * 4 * 2, 5), data(2 * 4 * 2, 6));
    let want = naive(c, &x, &cos, &sin, |b, s| b * 4 + s);
    let ins = [t(&shape(c), x), t(&[2, 4, 2], cos), t(&[2, 4, 2], sin)];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    let got = run(op(attrs(c), 3).as_ref(), &refs).unwrap();
    close(&got[0], &want, 1e-6);
}

#[test]
fn size_one_batch_of_ids_or_caches_broadcasts() {
    let c = Case {
        b: 3,
        s: 2,
        h: 1,
        d: 4,
        rot: 4,
        interleaved: false,
        four_d: true,
    };
    let x = data(3 * 2 * 4, 7);
    let (cos, sin) = (data(5 * 2, 8), data(5 * 2, 9));
    let ids = [3i64, 1];
    let want = naive(c, &x, &cos, &sin, |_, s| ids[s] as usize);
    let ins = [
        t(&shape(c), x.clone()),
        t(&[5, 2], cos.clone()),
        t(&[5, 2], sin.clone()),
        Tensor::from_vec(&[1, 2], ids.to_vec()).unwrap(),
    ];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    close(
        &run(op(attrs(c), 4).as_ref(), &refs).unwrap()[0],
        &want,
        1e-6,
    );
    // Caches of one batch row, without ids.
    let want = naive(c, &x, &cos, &sin, |_, s| s);
    let ins = [
        t(&shape(c), x),
        t(&[1, 2, 2], cos[..4].to_vec()),
        t(&[1, 2, 2], sin[..4].to_vec()),
    ];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    close(
        &run(op(attrs(c), 3).as_ref(), &refs).unwrap()[0],
        &want,
        1e-6,
    );
}

#[test]
fn f16_rounds_like_the_reference() {
    let c = Case {
        b: 1,
        s: 2,
        h: 2,
        d: 4,
        rot: 4,
        interleaved: false,
        four_d: true,
    };
    let h = |v: Vec<f32>| -> Vec<f16> { v.into_iter().map(f16::from_f32).collect() };
    let x = h(data(16, 10));
    let (cos, sin) = (h(data(4, 11)), h(data(4, 12)));
    let wide = |v: &[f16]| -> Vec<f32> { v.iter().map(|x| x.to_f32()).collect() };
    let want = naive(c, &wide(&x), &wide(&cos), &wide(&sin), |_, s| s);
    let ins = [
        Tensor::from_vec(&[1, 2, 2, 4], x).unwrap(),
        Tensor::from_vec(&[2, 2], cos).unwrap(),
        Tensor::from_vec(&[2, 2], sin).unwrap(),
        Tensor::from_vec(&[1, 2], vec![0i64, 1]).unwrap(),
    ];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    let got = run(op(vec![], 4).as_ref(), &refs).unwrap();
    assert_eq!(got[0].dtype(), crate::tensor::DType::F16);
    close(&got[0], &want, 4e-3);
}

#[test]
fn empty_sequence_gives_empty_output() {
    let ins = [
        t(&[2, 3, 0, 4], vec![]),
        t(&[5, 2], data(10, 1)),
        t(&[5, 2], data(10, 2)),
        Tensor::from_vec(&[2, 0], Vec::<i64>::new()).unwrap(),
    ];
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    let got = run(op(vec![], 4).as_ref(), &refs).unwrap();
    assert_eq!(got[0].shape(), &[2, 3, 0, 4]);
}

fn error(
    attrs: Vec<(&str, Attribute)>,
    x: &[usize],
    cache: &[usize],
    ids: Option<Tensor>,
) -> String {
    let n: usize = cache.iter().product();
    let mut ins = vec![
        t(x, vec![0.5; x.iter().product()]),
        t(cache, vec![1.0; n]),
        t(cache, vec![0.0; n]),
    ];
    let count = 3 + ids.is_some() as usize;
    ins.extend(ids);
    let refs: Vec<Option<&Tensor>> = ins.iter().map(Some).collect();
    message(op(attrs, count).run(&refs))
}

#[test]
fn bad_inputs_are_typed_errors() {
    let ids = || Some(Tensor::from_vec(&[1, 2], vec![0i64, 1]).unwrap());
    let m = error(vec![], &[1, 1, 2, 4], &[3, 1], ids());
    assert!(m.contains("max_position, 2"), "{m}");
    let m = error(
        vec![("rotary_embedding_dim", Attribute::Int(3))],
        &[1, 1, 2, 4],
        &[3, 1],
        ids(),
    );
    assert!(m.contains("must be even"), "{m}");
    let m = error(
        vec![("rotary_embedding_dim", Attribute::Int(6))],
        &[1, 1, 2, 4],
        &[3, 3],
        ids(),
    );
    assert!(m.contains("at most the head size"), "{m}");
    let m = error(vec![], &[1, 2, 8], &[3, 2], ids());
    assert!(m.contains("num_heads is required"), "{m}");
    let m = error(
        vec![("num_heads", Attribute::Int(3))],
        &[1, 2, 8],
        &[3, 2],
        ids(),
    );
    assert!(m.contains("not a multiple"), "{m}");
    let m = error(vec![], &[2, 4], &[3, 2], ids());
    assert!(m.contains("3-D or 4-D"), "{m}");
    let m = error(
        vec![],
        &[1, 1, 2, 4],
        &[3, 2],
        Some(Tensor::from_vec(&[1, 2], vec![0i64, 3]).unwrap()),
    );
    assert!(m.contains("position id 3"), "{m}");
    let m = error(
        vec![],
        &[1, 1, 2, 4],
        &[3, 2],
        Some(Tensor::from_vec(&[1, 2], vec![-1i64, 0]).unwrap()),
    );
    assert!(m.contains("position id -1"), "{m}");
    let m = error(
        vec![],
        &[1, 1, 2, 4],
        &[3, 2],
        Some(Tensor::from_vec(&[1, 2], vec![0i32, 1]).unwrap()),
    );
    assert!(m.contains("int64"), "{m}");
    let m = error(
        vec![],
        &[2, 1, 2, 4],
        &[3, 2],
        Some(Tensor::from_vec(&[3, 2], vec![0i64; 6]).unwrap()),
    );
    assert!(m.contains("want [2, 2]"), "{m}");
    let m = error(vec![], &[1, 1, 2, 4], &[1, 3, 2], None);
    assert!(m.contains("without position_ids"), "{m}");
    // Mismatched caches and types.
    let x = t(&[1, 1, 1, 2], vec![1.0, 2.0]);
    let (c, s) = (t(&[1, 1], vec![1.0]), t(&[2, 1], vec![1.0, 0.0]));
    let ids = Tensor::from_vec(&[1, 1], vec![0i64]).unwrap();
    let m = message(op(vec![], 4).run(&[Some(&x), Some(&c), Some(&s), Some(&ids)]));
    assert!(m.contains("differ in shape"), "{m}");
    let c64 = Tensor::from_vec(&[1, 1], vec![1.0f64]).unwrap();
    let m = message(op(vec![], 4).run(&[Some(&x), Some(&c64), Some(&c), Some(&ids)]));
    assert!(m.contains("cos_cache has type"), "{m}");
    let m = message(build(
        "",
        "RotaryEmbedding",
        23,
        vec![("num_heads", Attribute::Int(-1))],
        3,
        1,
    ));
    assert!(m.contains("num_heads"), "{m}");
}
