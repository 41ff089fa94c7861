//! What RNN, GRU and LSTM share: the common attributes (direction,
//! hidden_size, activations, clip, layout), the cell abstraction each
//! operator implements, and the generic operator (shape rule, FLOP count,
//! input checks and type dispatch) built around a cell.

use super::activation::{self, Act};
use super::driver;
use super::fast::{self, Prepared};
use crate::error::{Error, Result};
use crate::ir::{BuildContext, Fact, InferInput, Operator};
use crate::ops::util::{fact, input, opt_fact, opt_input};
use crate::tensor::{DType, Tensor};
use std::fmt::Debug;

/// The compute types: f32 (also for f16 and bf16) and f64.
pub(super) trait Scalar:
    num_traits::Float + ndarray::LinalgScalar + Send + Sync + Debug + Default
{
}
impl Scalar for f32 {}
impl Scalar for f64 {}

/// The weights and settings one direction's time step sees.
pub(super) struct StepCtx<'a, C> {
    /// Hidden size.
    pub hidden: usize,
    /// Batch size.
    pub batch: usize,
    /// Recurrence weights, `gates·hidden × hidden`, row-major.
    pub r: &'a [C],
    /// Recurrence bias, `gates·hidden`.
    pub rb: &'a [C],
    /// LSTM peepholes `[i, o, f]`, `3·hidden`, if given.
    pub p: Option<&'a [C]>,
    /// This direction's activations.
    pub acts: &'a [Act],
    /// Clip threshold for the activations' inputs.
    pub clip: Option<C>,
}

impl<C: Scalar> StepCtx<'_, C> {
    /// Clips `x` to ±clip when a threshold is set.
    #[inline]
    pub fn clip(&self, x: C) -> C {
        match self.clip {
            Some(t) => x.max(-t).min(t),
            None => x,
        }
    }
}

/// A recurrent cell: what distinguishes RNN, GRU and LSTM.
pub(super) trait Cell: Send + Sync + Debug + 'static {
    /// Operator name.
    const OP: &'static str;
    /// Gates per hidden unit (1, 3 or 4).
    const GATES: usize;
    /// Default activations of one direction.
    const ACTS: &'static [&'static str];
    /// Whether the cell has a cell state (LSTM: initial_c, peepholes, Y_c).
    const HAS_C: bool;

    /// Which cell this is, with its own attributes (for the f32 fast path).
    fn kind(&self) -> CellKind;

    /// One time step for every batch row: `xw` holds `X_t·Wᵀ + Wb`
    /// (`batch × gates·hidden`, may be overwritten), `h`/`c` the state in;
    /// writes the new state to `h_out`/`c_out` (`c` is empty without a cell
    /// state).
    fn step<C: Scalar>(
        &self,
        s: &StepCtx<C>,
        xw: &mut [C],
        h: &[C],
        c: &[C],
        h_out: &mut [C],
        c_out: &mut [C],
    ) -> Result<()>;
}

/// The cells the f32 fast path knows, with their own attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CellKind {
    /// `RNN`.
    Simple,
    /// `GRU`.
    Gru { linear_before_reset: bool },
    /// `LSTM`.
    Lstm { input_forget: bool },
}

impl CellKind {
    /// Gates per hidden unit.
    pub fn gates(self) -> usize {
        match self {
            CellKind::Simple => 1,
            CellKind::Gru { .. } => 3,
            CellKind::Lstm { .. } => 4,
        }
    }

    /// Operator name.
    pub fn op(self) -> &'static str {
        match self {
            CellKind::Simple => "RNN",
            CellKind::Gru { .. } => "GRU",
            CellKind::Lstm { .. } => "LSTM",
        }
    }

    /// Whether the cell has a cell state.
    pub fn has_c(self) -> bool {
        matches!(self, CellKind::Lstm { .. })
    }
}

/// The processing direction(s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    Forward,
    Reverse,
    Bidirectional,
}

impl Direction {
    /// Number of directions.
    pub fn count(self) -> usize {
        if self == Direction::Bidirectional {
            2
        } else {
            1
        }
    }

    /// Whether direction `d` runs backwards in time.
    pub fn reversed(self, d: usize) -> bool {
        self == Direction::Reverse || (self == Direction::Bidirectional && d == 1)
    }
}

/// The attributes every recurrent operator has.
#[derive(Debug, Clone)]
pub(super) struct Common {
    pub hidden: Option<usize>,
    pub direction: Direction,
    pub acts: Vec<Act>,
    pub clip: Option<f32>,
    pub batch_first: bool,
    pub outputs: usize,
}

/// A built RNN, GRU or LSTM node.
#[derive(Debug)]
pub(super) struct Recurrent<K: Cell> {
    pub common: Common,
    pub cell: K,
    /// Constant f32 W and R laid out for the fast path at build.
    pub prepared: Option<Prepared>,
}

impl<K: Cell> Recurrent<K> {
    /// Builds the node of `cell` from the build context.
    pub(super) fn new(ctx: &BuildContext, cell: K) -> Result<Recurrent<K>> {
        let common = common::<K>(ctx)?;
        let prepared = Prepared::from_consts(cell.kind(), common.direction.count(), ctx);
        Ok(Recurrent {
            common,
            cell,
            prepared,
        })
    }
}

/// Reads the common attributes of a `K` node.
pub(super) fn common<K: Cell>(ctx: &BuildContext) -> Result<Common> {
    let a = ctx.attrs;
    let direction = match a.string("direction", "forward")?.as_str() {
        "forward" => Direction::Forward,
        "reverse" => Direction::Reverse,
        "bidirectional" => Direction::Bidirectional,
        other => return Err(a.error("direction", format!("unknown direction {other:?}"))),
    };
    let hidden = match a.int_opt("hidden_size")? {
        None => None,
        Some(h) if h > 0 => Some(h as usize),
        Some(h) => return Err(a.error("hidden_size", format!("must be positive, is {h}"))),
    };
    let clip = match a.float_opt("clip")? {
        Some(c) if c.is_nan() || c <= 0.0 => {
            return Err(a.error("clip", format!("must be positive, is {c}")))
        }
        c => c,
    };
    let batch_first = match a.int("layout", 0)? {
        0 => false,
        1 if ctx.opset >= 14 => true,
        l => return Err(a.error("layout", format!("must be 0 or 1, is {l}"))),
    };
    let max_out = if K::HAS_C { 3 } else { 2 };
    if ctx.num_outputs > max_out {
        return Err(Error::op(
            K::OP,
            format!(
                "has at most {max_out} outputs, the node has {}",
                ctx.num_outputs
            ),
        ));
    }
    Ok(Common {
        hidden,
        direction,
        acts: activation::parse(a, K::ACTS, direction.count())?,
        clip,
        batch_first,
        outputs: ctx.num_outputs.max(1),
    })
}

/// The problem sizes of a node's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dims {
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
    pub dirs: usize,
}

impl<K: Cell> Recurrent<K> {
    /// Checks the shapes of X, W, R and the optional inputs and returns the
    /// problem sizes. `shapes[i]` is input i's shape (`None` when absent).
    pub(super) fn dims(&self, shapes: &[Option<&[usize]>]) -> Result<Dims> {
        let op = K::OP;
        let get = |i: usize| shapes.get(i).copied().flatten();
        let (x, w, r) = match (get(0), get(1), get(2)) {
            (Some(x), Some(w), Some(r)) => (x, w, r),
            _ => return Err(Error::op(op, "inputs X, W and R are required")),
        };
        for (name, s) in [("X", x), ("W", w), ("R", r)] {
            if s.len() != 3 {
                return Err(Error::op(
                    op,
                    format!("{name} must have rank 3, has shape {s:?}"),
                ));
            }
        }
        let (seq, batch) = if self.common.batch_first {
            (x[1], x[0])
        } else {
            (x[0], x[1])
        };
        let dirs = self.common.direction.count();
        let hidden = self.common.hidden.unwrap_or(r[2]);
        let g = K::GATES * hidden;
        let d = Dims {
            seq,
            batch,
            input: x[2],
            hidden,
            dirs,
        };
        let expect = |name: &str, got: &[usize], want: &[usize]| -> Result<()> {
            if got == want {
                Ok(())
            } else {
                Err(Error::op(
                    op,
                    format!("{name} has shape {got:?}, expected {want:?}"),
                ))
            }
        };
        expect("W", w, &[dirs, g, d.input])?;
        expect("R", r, &[dirs, g, hidden])?;
        if let Some(b) = get(3) {
            expect("B", b, &[dirs, 2 * g])?;
        }
        if let Some(l) = get(4) {
            expect("sequence_lens", l, &[batch])?;
        }
        let state = if self.common.batch_first {
            [batch, dirs, hidden]
        } else {
            [dirs, batch, hidden]
        };
        if let Some(h) = get(5) {
            expect("initial_h", h, &state)?;
        }
        if K::HAS_C {
            if let Some(c) = get(6) {
                expect("initial_c", c, &state)?;
            }
            if let Some(p) = get(7) {
                expect("P", p, &[dirs, 3 * hidden])?;
            }
        } else if get(6).is_some() {
            return Err(Error::op(op, "has at most 6 inputs"));
        }
        Ok(d)
    }

    /// The output shapes: Y, Y_h and (LSTM) Y_c, in the node's layout.
    fn out_shapes(&self, d: &Dims) -> Vec<Vec<usize>> {
        let (y, state) = if self.common.batch_first {
            (
                vec![d.batch, d.seq, d.dirs, d.hidden],
                vec![d.batch, d.dirs, d.hidden],
            )
        } else {
            (
                vec![d.seq, d.dirs, d.batch, d.hidden],
                vec![d.dirs, d.batch, d.hidden],
            )
        };
        let mut v = vec![y, state.clone(), state];
        v.truncate(self.common.outputs);
        v
    }
}

fn check_types(op: &str, dtypes: &[Option<DType>]) -> Result<DType> {
    let x = dtypes[0].unwrap_or(DType::F32);
    if !x.is_float() {
        return Err(Error::op(
            op,
            format!("expected floating-point X, found {x}"),
        ));
    }
    for (i, t) in dtypes.iter().enumerate().skip(1) {
        match t {
            Some(t) if i == 4 && !matches!(t, DType::I32 | DType::I64) => {
                return Err(Error::op(
                    op,
                    format!("sequence_lens must be int32, found {t}"),
                ))
            }
            Some(t) if i != 4 && *t != x => {
                return Err(Error::op(op, format!("input {i} is {t}, X is {x}")))
            }
            _ => {}
        }
    }
    Ok(x)
}

impl<K: Cell> Operator for Recurrent<K> {
    fn infer(&self, inputs: &[InferInput]) -> Result<Vec<Fact>> {
        let x = fact(K::OP, inputs, 0)?;
        let facts: Vec<Option<&Fact>> = (0..inputs.len()).map(|i| opt_fact(inputs, i)).collect();
        let dtypes: Vec<Option<DType>> = facts.iter().map(|f| f.map(|f| f.dtype)).collect();
        let dtype = check_types(K::OP, &dtypes)?;
        let shapes: Option<Vec<Option<&[usize]>>> = facts
            .iter()
            .map(|f| match f {
                None => Some(None),
                Some(f) => f.shape.as_deref().map(Some),
            })
            .collect();
        Ok(match shapes {
            Some(s) => {
                let d = self.dims(&s)?;
                self.out_shapes(&d)
                    .into_iter()
                    .map(|s| Fact::new(x.dtype, s))
                    .collect()
            }
            None => vec![Fact::unknown_shape(dtype); self.common.outputs],
        })
    }

    fn flops(&self, inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
        let shapes: Option<Vec<Option<&[usize]>>> = inputs
            .iter()
            .map(|f| match f {
                None => Some(None),
                Some(f) => f.shape.as_deref().map(Some),
            })
            .collect();
        let Some(d) = shapes.and_then(|s| self.dims(&s).ok()) else {
            return 0;
        };
        let gh = (K::GATES * d.hidden) as u64;
        let steps = (d.seq * d.batch * d.dirs) as u64;
        // Two products per step plus about ten elementwise operations per gate.
        steps * gh * (2 * (d.input + d.hidden) as u64 + 10)
    }

    fn run(&self, inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
        let shapes: Vec<Option<&[usize]>> = (0..inputs.len())
            .map(|i| opt_input(inputs, i).map(|t| t.shape()))
            .collect();
        self.run_shaped(inputs, &shapes)
    }
}

impl<K: Cell> Recurrent<K> {
    /// Runs the node on `inputs` whose shapes are `shapes`: W and R may be
    /// absent from `inputs` (but not from `shapes`) when the weights
    /// prepared at build fit.
    pub(super) fn run_shaped(
        &self,
        inputs: &[Option<&Tensor>],
        shapes: &[Option<&[usize]>],
    ) -> Result<Vec<Tensor>> {
        let x = input(K::OP, inputs, 0)?;
        let dtypes: Vec<Option<DType>> = (0..inputs.len())
            .map(|i| opt_input(inputs, i).map(|t| t.dtype()))
            .collect();
        check_types(K::OP, &dtypes)?;
        let d = self.dims(shapes)?;
        let shapes = self.out_shapes(&d);
        let dtype = x.dtype();
        let wrap = |outs: Vec<Vec<_>>| -> Result<Vec<Tensor>> {
            shapes
                .iter()
                .zip(outs)
                .map(|(shape, data)| driver::to_tensor(K::OP, dtype, shape, data))
                .collect()
        };
        match dtype {
            DType::F64 => {
                let outs: Vec<Vec<f64>> = driver::run::<K, f64>(self, &d, inputs)?;
                shapes
                    .iter()
                    .zip(outs)
                    .map(|(shape, data)| driver::to_tensor(K::OP, dtype, shape, data))
                    .collect()
            }
            DType::F32 => wrap(fast::run::<K>(self, &d, inputs)?),
            _ => wrap(driver::run::<K, f32>(self, &d, inputs)?),
        }
    }
}
