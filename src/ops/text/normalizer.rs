//! StringNormalizer (opset 10): drops the elements of a `[C]` or `[1, C]`
//! string tensor that are stop words (compared exactly, or after Unicode
//! lowercasing when `is_case_sensitive` is 0), then lower- or uppercases the
//! rest (`case_change_action`). When every element is dropped the output is
//! one empty string, of shape `[1]` or `[1, 1]`. Case changes use Unicode's
//! default mappings, which are what every locale gives except Turkish,
//! Azerbaijani and Lithuanian: a `locale` naming those is refused.

use super::{fact_len, string_fact, string_flops, strings};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::input;
use crate::tensor::{DType, Tensor};
use std::collections::HashSet;

const OP: &str = "StringNormalizer";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug)]
struct StringNormalizer {
    case: Case,
    case_sensitive: bool,
    /// The stop words, lowercased when matching ignores case.
    stopwords: HashSet<String>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let a = ctx.attrs;
    let case = match a.string("case_change_action", "NONE")?.as_str() {
        "NONE" => Case::Keep,
        "LOWER" => Case::Lower,
        "UPPER" => Case::Upper,
        other => {
            return Err(a.error(
                "case_change_action",
                format!("must be LOWER, UPPER or NONE, found {other:?}"),
            ))
        }
    };
    if let Some(locale) = a.string_opt("locale")? {
        let language = locale
            .split(['_', '-', '.', '@'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if matches!(language.as_str(), "tr" | "az" | "lt") {
            return Err(Error::UnsupportedFeature {
                op: OP.into(),
                feature: format!(
                    "locale {locale:?} (its case mappings differ from Unicode's defaults)"
                ),
            });
        }
    }
    let case_sensitive = a.int("is_case_sensitive", 0)? != 0;
    let stopwords = a
        .strings_opt("stopwords")?
        .unwrap_or_default()
        .into_iter()
        .map(|w| if case_sensitive { w } else { w.to_lowercase() })
        .collect();
    Ok(Box::new(StringNormalizer {
        case,
        case_sensitive,
        stopwords,
    }))
}

/// Checks the input shape: `[C]` or `[1, C]`.
fn check_shape(shape: &[usize]) -> Result<()> {
    match shape {
        [_] | [1, _] => Ok(()),
        other => Err(Error::op(
            OP,
            format!("input must have shape [C] or [1, C], found {other:?}"),
        )),
    }
}

impl StringNormalizer {
    fn is_stopword(&self, s: &str) -> bool {
        if self.stopwords.is_empty() {
            false
        } else if self.case_sensitive {
            self.stopwords.contains(s)
        } else {
            self.stopwords.contains(&s.to_lowercase())
        }
    }

    fn change_case(&self, s: &str) -> String {
        match self.case {
            Case::Keep => s.to_string(),
            Case::Lower => s.to_lowercase(),
            Case::Upper => s.to_uppercase(),
        }
    }
}

impl Operator for StringNormalizer {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = string_fact(OP, inputs, 0, "X")?;
        let Some(shape) = &x.shape else {
            return Ok(vec![Fact::unknown_shape(DType::String)]);
        };
        check_shape(shape)?;
        let c = shape[shape.len() - 1];
        Ok(vec![if self.stopwords.is_empty() && c > 0 {
            Fact::new(DType::String, shape.clone())
        } else {
            Fact::unknown_shape(DType::String)
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        // At least one string is written, even for an empty input.
        2 * string_flops(fact_len(inputs, 0).max(1))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = strings(OP, "X", input(OP, inputs, 0)?)?;
        check_shape(x.shape())?;
        let mut kept: Vec<String> = x
            .iter()
            .filter(|s| !self.is_stopword(s))
            .map(|s| self.change_case(s))
            .collect();
        if kept.is_empty() {
            kept.push(String::new());
        }
        let mut shape = x.shape().to_vec();
        *shape.last_mut().unwrap_or(&mut 0) = kept.len();
        Ok(vec![Tensor::from_vec(&shape, kept)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::attributes::Attribute;
    use crate::ops::testutil::{build_op, infer_and_run, int, string};
    use crate::tensor::Tensor;

    fn strs(shape: &[usize], v: &[&str]) -> Tensor {
        Tensor::from_vec(shape, v.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    fn words(v: &[&str]) -> Attribute {
        Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
    }

    fn normalize(x: &Tensor, attrs: &[(&str, Attribute)]) -> crate::Result<Tensor> {
        let op = build_op("StringNormalizer", 10, attrs, &[], 1, 1)?;
        Ok(infer_and_run(op.as_ref(), &[Some(x)])?.remove(0))
    }

    #[test]
    fn stopwords_with_and_without_case() {
        let x = strs(&[4], &["Straße", "the", "THE", "ok"]);
        let y = normalize(
            &x,
            &[
                ("stopwords", words(&["the"])),
                ("case_change_action", string("UPPER")),
            ],
        );
        assert_eq!(y.unwrap(), strs(&[2], &["STRASSE", "OK"]));
        let attrs = [
            ("stopwords", words(&["the"])),
            ("is_case_sensitive", int(1)),
            ("case_change_action", string("LOWER")),
        ];
        let y = normalize(&x, &attrs).unwrap();
        assert_eq!(y, strs(&[3], &["straße", "the", "ok"]));
    }

    #[test]
    fn all_dropped_gives_one_empty_string() {
        let attrs = [("stopwords", words(&["a"]))];
        assert_eq!(
            normalize(&strs(&[1, 2], &["a", "A"]), &attrs).unwrap(),
            strs(&[1, 1], &[""])
        );
        assert_eq!(
            normalize(&strs(&[0], &[]), &attrs).unwrap(),
            strs(&[1], &[""])
        );
        // No stop words, no case change: unchanged (inferred shape too).
        let x = strs(&[1, 2], &["Ab", ""]);
        assert_eq!(normalize(&x, &[]).unwrap(), x);
    }

    #[test]
    fn refuses_bad_shapes_attributes_and_locales() {
        assert!(normalize(&strs(&[2, 1], &["a", "b"]), &[]).is_err());
        assert!(normalize(
            &strs(&[1], &["a"]),
            &[("case_change_action", string("TITLE"))]
        )
        .is_err());
        let e = normalize(&strs(&[1], &["i"]), &[("locale", string("tr_TR.UTF-8"))]).unwrap_err();
        assert!(matches!(e, crate::Error::UnsupportedFeature { .. }), "{e}");
        assert!(normalize(&strs(&[1], &["i"]), &[("locale", string("en_US"))]).is_ok());
        let n = Tensor::from_vec(&[1], vec![1i32]).unwrap();
        assert!(normalize(&n, &[]).is_err());
    }
}
