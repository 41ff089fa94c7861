//! Node test cases whose outputs are random (Bernoulli, Dropout in training
//! mode): onnx's reference draws them with numpy's generator, which ramify
//! does not reproduce, so their stored values cannot be matched. Such a case
//! is listed in `tests/conformance/random.txt` with the property its outputs
//! must have; it is still run, its outputs' count, element types and shapes
//! must match the stored ones exactly, and then the property is checked in
//! place of the values. Tolerances are not loosened: a case not listed is
//! compared value by value as usual.

use ramify::Tensor;
use std::collections::BTreeMap;
use std::path::Path;

/// What a random case's outputs must satisfy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Property {
    /// Every element of every output is 0 or 1 (false or true).
    Binary,
    /// Dropout in training mode (inputs x, ratio): each element of output 0
    /// is 0 or x/(1 − ratio) (ONNX's tolerances); output 1, when present, is
    /// true exactly where the element was kept; the kept count is within 6
    /// standard deviations of n·(1 − ratio) (all of them for ratio 0).
    Dropout,
}

impl Property {
    /// The property's name in `random.txt`.
    pub fn name(self) -> &'static str {
        match self {
            Property::Binary => "binary",
            Property::Dropout => "dropout",
        }
    }

    fn parse(s: &str) -> Property {
        match s {
            "binary" => Property::Binary,
            "dropout" => Property::Dropout,
            other => panic!("random.txt: unknown property {other:?}"),
        }
    }

    /// What the property checks, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Property::Binary => "every value is 0 or 1",
            Property::Dropout => {
                "each value is 0 or x/(1 − ratio), the mask true exactly where kept, \
                 the kept count within 6σ of n·(1 − ratio)"
            }
        }
    }
}

/// The cases of `random.txt` (`case: property`) with their property; an
/// unknown property fails the test.
pub fn read(path: &Path) -> BTreeMap<String, Property> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (case, prop) = l
                .split_once(':')
                .unwrap_or_else(|| panic!("random.txt: {l:?} is not `case: property`"));
            (case.trim().to_string(), Property::parse(prop.trim()))
        })
        .collect()
}

/// Checks the outputs `got` of a random case run on `inputs` against the
/// stored outputs `want` (types and shapes) and the property.
pub fn check(
    prop: Property,
    inputs: &[Tensor],
    got: &[Tensor],
    want: &[Tensor],
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs instead of {}", got.len(), want.len()));
    }
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if (g.dtype(), g.shape()) != (w.dtype(), w.shape()) {
            return Err(format!(
                "output {k}: {} {:?} instead of {} {:?}",
                g.dtype(),
                g.shape(),
                w.dtype(),
                w.shape()
            ));
        }
    }
    match prop {
        Property::Binary => got.iter().enumerate().try_for_each(|(k, t)| binary(k, t)),
        Property::Dropout => dropout(inputs, got),
    }
}

fn values(t: &Tensor) -> Result<Vec<f64>, String> {
    match t {
        Tensor::Bool(a) => Ok(a.iter().map(|&b| f64::from(u8::from(b))).collect()),
        t => t.to_f64_vec().map_err(|e| e.to_string()),
    }
}

fn binary(k: usize, t: &Tensor) -> Result<(), String> {
    match values(t)?.iter().position(|&v| v != 0.0 && v != 1.0) {
        Some(i) => Err(format!("output {k}, element {i}: not 0 or 1")),
        None => Ok(()),
    }
}

fn dropout(inputs: &[Tensor], got: &[Tensor]) -> Result<(), String> {
    let x = values(inputs.first().ok_or("no input x")?)?;
    let ratio = match inputs.get(1).map(values).transpose()?.as_deref() {
        Some([r]) => *r,
        None => 0.5,
        Some(r) => return Err(format!("ratio {r:?} is not one value")),
    };
    let y = values(got.first().ok_or("no output")?)?;
    let mask = got.get(1).map(values).transpose()?;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-7 + 1e-3 * b.abs();
    let mut kept_count = 0usize;
    for (i, (&y, &x)) in y.iter().zip(&x).enumerate() {
        let scaled = x / (1.0 - ratio);
        let (is_kept, is_zero) = (close(y, scaled), y == 0.0);
        let kept = match mask.as_ref().map(|m| m[i] == 1.0) {
            Some(m) if (m && is_kept) || (!m && is_zero) => m,
            Some(m) => return Err(format!("element {i}: {y} with mask {m} (x {x})")),
            None if is_kept => true,
            None if is_zero => false,
            None => return Err(format!("element {i}: {y} is neither 0 nor {scaled}")),
        };
        kept_count += usize::from(kept);
    }
    let n = y.len() as f64;
    let (want, sd) = (n * (1.0 - ratio), (n * ratio * (1.0 - ratio)).sqrt());
    if (kept_count as f64 - want).abs() > 6.0 * sd {
        return Err(format!(
            "{kept_count} of {n} kept, expected {want} ± 6·{sd:.2}"
        ));
    }
    Ok(())
}

#[test]
fn properties_reject_wrong_outputs() {
    let t = |v: Vec<f32>| Tensor::from_vec(&[v.len()], v).unwrap();
    let b = |v: Vec<bool>| Tensor::from_vec(&[v.len()], v).unwrap();
    let want = [t(vec![0.0; 3])];
    assert!(check(Property::Binary, &[], &[t(vec![0.0, 1.0, 1.0])], &want).is_ok());
    assert!(check(Property::Binary, &[], &[t(vec![0.0, 0.5, 1.0])], &want).is_err());
    // Types and shapes must match the stored outputs.
    let f64s = Tensor::from_vec(&[3], vec![0.0f64; 3]).unwrap();
    assert!(check(Property::Binary, &[], &[f64s], &want).is_err());
    assert!(check(Property::Binary, &[], &[t(vec![0.0; 2])], &want).is_err());
    // Dropout, ratio 0.5: kept values are doubled.
    let x = t(vec![1.0, 2.0, 3.0, 4.0]);
    let inputs = [x.clone(), Tensor::scalar(0.5f32)];
    let want = [x.clone(), b(vec![true; 4])];
    let y = t(vec![2.0, 0.0, 6.0, 0.0]);
    let mask = b(vec![true, false, true, false]);
    assert!(check(
        Property::Dropout,
        &inputs,
        &[y.clone(), mask.clone()],
        &want
    )
    .is_ok());
    let wrong_scale = t(vec![1.0, 0.0, 3.0, 0.0]);
    assert!(check(Property::Dropout, &inputs, &[wrong_scale, mask], &want).is_err());
    let wrong_mask = b(vec![true, true, true, false]);
    assert!(check(Property::Dropout, &inputs, &[y, wrong_mask], &want).is_err());
    // Ratio 0 keeps every element.
    let zero = [x.clone(), Tensor::scalar(0.0f32)];
    let dropped = t(vec![1.0, 2.0, 0.0, 4.0]);
    assert!(check(Property::Dropout, &zero, &[dropped], &want[..1]).is_err());
    assert!(check(
        Property::Dropout,
        &zero,
        std::slice::from_ref(&x),
        &want[..1]
    )
    .is_ok());
}
