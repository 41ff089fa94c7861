//! RegexFullMatch (opset 20): whether each string matches `pattern` (RE2
//! syntax) as a whole. The `regex` crate's syntax is RE2's, but its Perl
//! classes and word boundaries are Unicode-aware where RE2's are ASCII, so
//! the pattern is first rewritten: `\d \w \s` (and negations) become RE2's
//! ASCII classes, `\b \B` ASCII boundaries, `\Q...\E` escaped literal text,
//! and a `[`, `&` or `~` inside a class a literal (the crate would read them
//! as a nested class or set operation). A pattern neither accepts is refused
//! at load with an attribute error.

use super::{fact_len, string_fact, string_flops, strings};
use crate::error::Result;
use crate::ir::{BuildContext, Fact, InferInput, OpClass, Operator};
use crate::ops::util::input;
use crate::tensor::{DType, Tensor};
use regex::Regex;

const OP: &str = "RegexFullMatch";

#[derive(Debug)]
struct RegexFullMatch {
    regex: Regex,
}

pub(super) fn build(ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    let pattern = ctx
        .attrs
        .string_opt("pattern")?
        .ok_or_else(|| ctx.attrs.error("pattern", "required but missing"))?;
    let anchored = format!(r"\A(?:{})\z", translate(&pattern));
    let regex = Regex::new(&anchored).map_err(|e| ctx.attrs.error("pattern", e.to_string()))?;
    Ok(Box::new(RegexFullMatch { regex }))
}

/// The replacement of an RE2 Perl class (ASCII) valid inside and outside a
/// bracketed class (the crate accepts nested classes).
fn ascii_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        'w' => "[0-9A-Za-z_]",
        'W' => "[^0-9A-Za-z_]",
        's' => r"[\t\n\f\r ]",
        'S' => r"[^\t\n\f\r ]",
        _ => return None,
    })
}

/// Rewrites an RE2 pattern into the `regex` crate's syntax with RE2's meaning.
fn translate(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    // Whether the next character is the first of a class (where `]` is literal).
    let mut class_start = false;
    while let Some(c) = chars.next() {
        let first = std::mem::take(&mut class_start);
        match c {
            '\\' => match chars.next() {
                Some(e) if ascii_class(e).is_some() => out.push_str(ascii_class(e).unwrap_or("")),
                Some(e @ ('b' | 'B')) if !in_class => {
                    out.push_str(r"(?-u:\");
                    out.push(e);
                    out.push(')');
                }
                Some('Q') => {
                    let mut literal = String::new();
                    while let Some(l) = chars.next() {
                        if l == '\\' && chars.peek() == Some(&'E') {
                            chars.next();
                            break;
                        }
                        literal.push(l);
                    }
                    out.push_str(&regex::escape(&literal));
                }
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.peek() == Some(&'^') {
                    chars.next();
                    out.push('^');
                }
                class_start = true;
            }
            '[' if chars.peek() == Some(&':') => {
                // A POSIX class `[:name:]`: copied up to its `:]`.
                out.push('[');
                let mut prev = '[';
                for p in chars.by_ref() {
                    out.push(p);
                    if prev == ':' && p == ']' {
                        break;
                    }
                    prev = p;
                }
            }
            ']' if in_class && !first => {
                in_class = false;
                out.push(']');
            }
            '[' | '&' | '~' | ']' if in_class => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

impl Operator for RegexFullMatch {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = string_fact(OP, inputs, 0, "X")?;
        Ok(vec![Fact {
            kind: crate::ir::Kind::Tensor,
            dtype: DType::Bool,
            shape: x.shape.clone(),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        // A finite automaton: a few steps per byte.
        4 * string_flops(fact_len(inputs, 0))
    }

    fn cost_class(&self) -> OpClass {
        OpClass::Other
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = strings(OP, "X", input(OP, inputs, 0)?)?;
        Ok(vec![Tensor::Bool(x.map(|s| self.regex.is_match(s)))])
    }
}

#[cfg(test)]
mod tests {
    use super::translate;
    use crate::ops::testutil::{build_op, infer_and_run, string};
    use crate::tensor::Tensor;

    fn matches(pattern: &str, v: &[&str]) -> Vec<bool> {
        let op = build_op(
            "RegexFullMatch",
            20,
            &[("pattern", string(pattern))],
            &[],
            1,
            1,
        )
        .unwrap();
        let x = Tensor::from_vec(&[v.len()], v.iter().map(|s| s.to_string()).collect()).unwrap();
        let y = infer_and_run(op.as_ref(), &[Some(&x)]).unwrap().remove(0);
        y.view::<bool>().unwrap().iter().copied().collect()
    }

    #[test]
    fn whole_string_only() {
        assert_eq!(
            matches("ab|c", &["ab", "c", "abc", "xab", ""]),
            [true, true, false, false, false]
        );
        assert_eq!(matches("a*", &["", "aaa", "aab"]), [true, true, false]);
        // `$` and `^` inside the pattern keep their meaning.
        assert_eq!(
            matches("(^|x)a($|y)", &["a", "xay", "xa"]),
            [true, true, true]
        );
    }

    #[test]
    fn perl_classes_are_ascii_as_in_re2() {
        assert_eq!(
            matches(r"\w+", &["abc_1", "é", "ab c"]),
            [true, false, false]
        );
        assert_eq!(matches(r"\d", &["7", "٣"]), [true, false]);
        assert_eq!(matches(r"\W", &["é", "a"]), [true, false]);
        assert_eq!(matches(r"[\w.-]+", &["a.b-c", "a b"]), [true, false]);
        assert_eq!(matches(r"\s", &[" ", "\u{3000}"]), [true, false]);
        // ASCII word boundary: é is not a word character for RE2.
        assert_eq!(matches(r".*\bx", &["éx", "ax"]), [true, false]);
        // Unicode classes by name stay Unicode.
        assert_eq!(matches(r"\pL", &["é", "1"]), [true, false]);
    }

    #[test]
    fn re2_literals_and_classes() {
        assert_eq!(translate(r"\Qa.b\E+"), r"a\.b+");
        assert_eq!(matches(r"\Qa.b\E", &["a.b", "axb"]), [true, false]);
        assert_eq!(matches(r"[]a]", &["]", "a", "b"]), [true, true, false]);
        assert_eq!(matches(r"[[]", &["["]), [true]);
        assert_eq!(matches(r"[a&&b]", &["&", "a"]), [true, true]);
        assert_eq!(matches(r"[[:digit:]x]+", &["1x2", "y"]), [true, false]);
    }

    #[test]
    fn empty_input_and_errors() {
        let op = build_op("RegexFullMatch", 20, &[("pattern", string("a"))], &[], 1, 1).unwrap();
        let x = Tensor::from_vec::<String>(&[2, 0], vec![]).unwrap();
        let y = infer_and_run(op.as_ref(), &[Some(&x)]).unwrap().remove(0);
        assert_eq!(y.shape(), &[2, 0]);
        let n = Tensor::from_vec(&[1], vec![1f32]).unwrap();
        assert!(op
            .run(&[Some(&n)])
            .unwrap_err()
            .to_string()
            .contains("string"));
        let e = build_op(
            "RegexFullMatch",
            20,
            &[("pattern", string("(a"))],
            &[],
            1,
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("pattern"), "{e}");
        assert!(build_op("RegexFullMatch", 20, &[], &[], 1, 1).is_err());
    }
}
