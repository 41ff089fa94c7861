//! StringSplit (opset 20): splits every string on `delimiter` (consecutive
//! delimiters give empty pieces) or, when it is unset or empty, on runs of
//! whitespace with leading and trailing whitespace dropped, as Python's
//! `str.split` does. At most `maxsplit` splits are made (a negative value
//! means no limit, Python's convention); the rest of the string is the last
//! piece. Output 0 has one more axis, as long as the most pieces of any
//! element, padded with empty strings; output 1 holds each element's count.

use super::{fact_len, string_fact, string_flops, strings};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::input;
use crate::tensor::{budget, DType, Tensor};

const OP: &str = "StringSplit";

#[derive(Debug)]
struct StringSplit {
    /// `None`: split on whitespace.
    delimiter: Option<String>,
    /// `None`: no limit.
    maxsplit: Option<usize>,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    if ctx.num_outputs > 2 {
        return Err(Error::op(
            OP,
            format!("has at most 2 outputs, the node has {}", ctx.num_outputs),
        ));
    }
    let delimiter = ctx.attrs.string_opt("delimiter")?.filter(|d| !d.is_empty());
    let maxsplit = ctx
        .attrs
        .int_opt("maxsplit")?
        .and_then(|m| usize::try_from(m).ok());
    Ok(Box::new(StringSplit {
        delimiter,
        maxsplit,
    }))
}

/// Whitespace as Python's `str.isspace` sees it: Unicode White_Space plus the
/// information separators U+001C..U+001F.
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `s.split(None, maxsplit)`.
fn split_whitespace(s: &str, max: Option<usize>) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim_start_matches(is_space);
    while !rest.is_empty() {
        if max == Some(out.len()) {
            out.push(rest);
            break;
        }
        match rest.find(is_space) {
            Some(end) => {
                out.push(&rest[..end]);
                rest = rest[end..].trim_start_matches(is_space);
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

/// Python's `s.split(delimiter, maxsplit)` for a non-empty delimiter.
fn split_on<'a>(s: &'a str, delimiter: &str, max: Option<usize>) -> Vec<&'a str> {
    match max {
        Some(m) => s.splitn(m.saturating_add(1), delimiter).collect(),
        None => s.split(delimiter).collect(),
    }
}

impl StringSplit {
    fn pieces<'a>(&self, s: &'a str) -> Vec<&'a str> {
        match &self.delimiter {
            Some(d) => split_on(s, d, self.maxsplit),
            None => split_whitespace(s, self.maxsplit),
        }
    }
}

impl Operator for StringSplit {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = string_fact(OP, inputs, 0, "X")?;
        let counts = match &x.shape {
            Some(s) => Fact::new(DType::I64, s.clone()),
            None => Fact::unknown_shape(DType::I64),
        };
        Ok(vec![Fact::unknown_shape(DType::String), counts])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        2 * string_flops(fact_len(inputs, 0))
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = strings(OP, "X", input(OP, inputs, 0)?)?;
        let split: Vec<Vec<&str>> = x.iter().map(|s| self.pieces(s)).collect();
        let width = split.iter().map(Vec::len).max().unwrap_or(0);
        let mut shape = x.shape().to_vec();
        shape.push(width);
        budget::check("StringSplit output", DType::String, &shape)?;
        let mut data = Vec::with_capacity(split.len() * width);
        for pieces in &split {
            data.extend(pieces.iter().map(|p| p.to_string()));
            data.extend(std::iter::repeat_n(String::new(), width - pieces.len()));
        }
        let counts: Vec<i64> = split.iter().map(|p| p.len() as i64).collect();
        let counts = Tensor::from_vec(x.shape(), counts)?;
        Ok(vec![Tensor::from_vec(&shape, data)?, counts])
    }
}

#[cfg(test)]
mod tests {
    use super::{split_on, split_whitespace};
    use crate::ir::attributes::Attribute;
    use crate::ops::testutil::{build_op, infer_and_run, int, string};
    use crate::tensor::Tensor;

    fn strs(shape: &[usize], v: &[&str]) -> Tensor {
        Tensor::from_vec(shape, v.iter().map(|s| s.to_string()).collect()).unwrap()
    }

    fn split(x: &Tensor, attrs: &[(&str, Attribute)]) -> (Tensor, Vec<i64>) {
        let op = build_op("StringSplit", 20, attrs, &[], 1, 2).unwrap();
        let mut o = infer_and_run(op.as_ref(), &[Some(x)]).unwrap();
        let counts = o.pop().unwrap();
        assert_eq!(counts.shape(), x.shape());
        (o.pop().unwrap(), counts.to_i64_vec().unwrap())
    }

    #[test]
    fn whitespace_matches_python() {
        // Hand-checked against Python's str.split(None, maxsplit).
        assert_eq!(split_whitespace("  a \t b\n", None), ["a", "b"]);
        assert_eq!(split_whitespace("  a  b  c  ", Some(1)), ["a", "b  c  "]);
        assert_eq!(split_whitespace("a b", Some(0)), ["a b"]);
        assert!(split_whitespace(" \u{3000}\u{1f} ", None).is_empty());
        assert!(split_whitespace("", Some(3)).is_empty());
    }

    #[test]
    fn delimiter_matches_python() {
        assert_eq!(split_on("", ",", None), [""]);
        assert_eq!(split_on(",a,,", ",", None), ["", "a", "", ""]);
        assert_eq!(split_on("a<>b<>c", "<>", Some(1)), ["a", "b<>c"]);
        assert_eq!(split_on("a,b", ",", Some(0)), ["a,b"]);
    }

    #[test]
    fn pads_to_the_longest_and_counts() {
        let x = strs(&[3], &["a.b.c", "", "d"]);
        let (y, n) = split(&x, &[("delimiter", string("."))]);
        assert_eq!(y, strs(&[3, 3], &["a", "b", "c", "", "", "", "d", "", ""]));
        assert_eq!(n, [3, 1, 1]);
        // Whitespace mode: an empty string has no pieces.
        let (y, n) = split(&x, &[("delimiter", string("")), ("maxsplit", int(-1))]);
        assert_eq!(y, strs(&[3, 1], &["a.b.c", "", "d"]));
        assert_eq!(n, [1, 0, 1]);
    }

    #[test]
    fn empty_and_scalar_inputs() {
        let (y, n) = split(&strs(&[2, 0], &[]), &[]);
        assert_eq!(y.shape(), &[2, 0, 0]);
        assert!(n.is_empty());
        let (y, n) = split(&strs(&[], &["x y"]), &[("maxsplit", int(5))]);
        assert_eq!(y, strs(&[2], &["x", "y"]));
        assert_eq!(n, [2]);
    }

    #[test]
    fn refuses_numbers() {
        let op = build_op("StringSplit", 20, &[], &[], 1, 2).unwrap();
        let x = Tensor::from_vec(&[1], vec![1i64]).unwrap();
        assert!(op
            .run(&[Some(&x)])
            .unwrap_err()
            .to_string()
            .contains("string"));
    }
}
