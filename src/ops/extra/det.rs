//! Det: the determinant of each square matrix in the last two axes
//! (`[*, M, M]` → `[*]`), by LU decomposition with partial pivoting in f64.

use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::quant::float_tensor;
use crate::ops::util::{fact, input};
use crate::tensor::{DType, Tensor};

const OP: &str = "Det";

#[derive(Debug)]
struct Det;

pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Ok(Box::new(Det))
}

/// The batch shape and matrix size of an input shape.
fn split(shape: &[usize]) -> Result<(&[usize], usize)> {
    let r = shape.len();
    if r < 2 || shape[r - 1] != shape[r - 2] {
        return Err(Error::op(
            OP,
            format!("expected square matrices [*, M, M], found shape {shape:?}"),
        ));
    }
    Ok((&shape[..r - 2], shape[r - 1]))
}

/// The determinant of the row-major n×n matrix `a` (overwritten).
pub(super) fn lu_det(a: &mut [f64], n: usize) -> f64 {
    let mut det = 1.0;
    for k in 0..n {
        // Partial pivoting: the largest magnitude in column k at or below row k.
        let mut p = k;
        for i in k + 1..n {
            if a[i * n + k].abs() > a[p * n + k].abs() {
                p = i;
            }
        }
        let pivot = a[p * n + k];
        if pivot == 0.0 {
            return 0.0;
        }
        if p != k {
            for j in 0..n {
                a.swap(k * n + j, p * n + j);
            }
            det = -det;
        }
        det *= pivot;
        for i in k + 1..n {
            let f = a[i * n + k] / pivot;
            for j in k + 1..n {
                a[i * n + j] -= f * a[k * n + j];
            }
        }
    }
    det
}

impl Operator for Det {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let f = fact(OP, inputs, 0)?;
        if !f.dtype.is_float() {
            return Err(Error::op(
                OP,
                format!("expected a float input, found {}", f.dtype),
            ));
        }
        Ok(vec![match &f.shape {
            Some(s) => Fact::new(f.dtype, split(s)?.0.to_vec()),
            None => Fact::unknown_shape(f.dtype),
        }])
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let Some(Some(s)) = inputs.first().map(|f| f.and_then(|f| f.shape.as_ref())) else {
            return 0;
        };
        match split(s) {
            Ok((batch, n)) => {
                let n = n as u64;
                batch.iter().product::<usize>() as u64 * (2 * n * n * n / 3 + n)
            }
            Err(_) => 0,
        }
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let x = input(OP, inputs, 0)?;
        if !x.dtype().is_float() || x.dtype() == DType::String {
            return Err(Error::op(
                OP,
                format!("expected a float input, found {}", x.dtype()),
            ));
        }
        let (batch, n) = split(x.shape())?;
        let mut v = x.to_f64_vec()?;
        let dets: Vec<f64> = if n == 0 {
            vec![1.0; batch.iter().product()]
        } else {
            v.chunks_mut(n * n).map(|m| lu_det(m, n)).collect()
        };
        Ok(vec![float_tensor(OP, x.dtype(), batch, dets)?])
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testutil::{assert_tensor_close, run};
    use crate::tensor::Tensor;

    /// Laplace expansion: the textbook definition.
    fn naive(a: &[f64], n: usize) -> f64 {
        if n == 1 {
            return a[0];
        }
        (0..n)
            .map(|j| {
                let minor: Vec<f64> = (1..n)
                    .flat_map(|i| (0..n).filter(move |&c| c != j).map(move |c| (i, c)))
                    .map(|(i, c)| a[i * n + c])
                    .collect();
                let sign = if j % 2 == 0 { 1.0 } else { -1.0 };
                sign * a[j] * naive(&minor, n - 1)
            })
            .collect::<Vec<_>>()
            .iter()
            .sum()
    }

    #[test]
    fn matches_laplace_expansion_batched() {
        let n = 4;
        let v: Vec<f64> = crate::ops::testutil::rand_vec(3 * n * n, 9)
            .into_iter()
            .map(|x| x as f64)
            .collect();
        let x = Tensor::from_vec(&[3, n, n], v.clone()).unwrap();
        let y = run("Det", 11, &[], &[Some(&x)]).unwrap();
        assert_eq!(y[0].shape(), &[3]);
        let want: Vec<f64> = v.chunks(n * n).map(|m| naive(m, n)).collect();
        assert_tensor_close(&y[0], &want, 1e-12, 1e-12);
    }

    #[test]
    fn spec_example_and_singular_and_errors() {
        // ONNX example: det([[1, 2], [3, 4]]) = -2; a pivot swap is needed for [[0,1],[1,0]].
        let x = Tensor::from_vec(
            &[3, 2, 2],
            vec![1f32, 2., 3., 4., 0., 1., 1., 0., 1., 2., 2., 4.],
        )
        .unwrap();
        let y = run("Det", 11, &[], &[Some(&x)]).unwrap();
        assert_tensor_close(&y[0], &[-2.0, -1.0, 0.0], 1e-6, 1e-6);
        let bad = Tensor::from_vec(&[2, 3], vec![0f32; 6]).unwrap();
        assert!(run("Det", 11, &[], &[Some(&bad)])
            .unwrap_err()
            .to_string()
            .contains("square"));
        let int = Tensor::from_vec(&[1, 1], vec![1i32]).unwrap();
        assert!(run("Det", 11, &[], &[Some(&int)]).is_err());
    }
}
