//! [`Outputs`] and [`Session::run_bound`]: inputs shared without a copy,
//! only the outputs asked for computed (the rest of the graph is pruned from
//! the plan), and results written into buffers the caller owns.

use super::{RunOptions, RunReport, Session};
use crate::error::{Error, Result};
use crate::exec::Plan;
use crate::ir::Value;
use crate::tensor::{DType, Tensor};
use std::sync::Arc;

/// The outputs a run computes, and where each one goes: a new tensor
/// ([`select`](Self::select)) or a caller's byte buffer
/// ([`bind`](Self::bind)) that the run writes the elements into. With
/// nothing chosen, a run returns every output as a new tensor.
///
/// ```
/// use ramify::{Outputs, RunOptions, Session, Tensor};
/// use std::sync::Arc;
/// let session = Session::from_file("models/inception_mini.onnx")?;
/// let name = session.outputs()[0].name.clone();
/// // The input is shared with the run, not copied: the app can write the
/// // next frame into it (`Arc::get_mut`) once the run has returned.
/// let frame = Arc::new(Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]));
/// let mut probabilities = vec![0u8; 4 * 100]; // 100 floats
/// let mut outputs = Outputs::new();
/// outputs.bind(&name, &mut probabilities);
/// session.run_bound([("input", frame.clone())], &mut outputs, &RunOptions::new())?;
/// assert_eq!(outputs.shape(&name), Some(&[1, 100][..]));
/// drop(outputs);
/// let first = f32::from_ne_bytes(probabilities[..4].try_into().unwrap());
/// assert!(first.is_finite());
/// # Ok::<(), ramify::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct Outputs<'buf> {
    entries: Vec<Entry<'buf>>,
}

#[derive(Debug)]
struct Entry<'buf> {
    name: String,
    buffer: Option<&'buf mut [u8]>,
    result: Option<Tensor>,
    dtype: Option<DType>,
    shape: Option<Vec<usize>>,
}

impl<'buf> Outputs<'buf> {
    /// Nothing chosen yet (a run then returns every output).
    pub fn new() -> Outputs<'buf> {
        Outputs::default()
    }

    /// Computes output `name` into a new tensor, read with [`get`](Self::get)
    /// or [`take`](Self::take) after the run. Replaces a buffer bound to it.
    pub fn select(&mut self, name: &str) -> &mut Self {
        self.entry(name).buffer = None;
        self
    }

    /// Computes output `name` into `buffer`: its elements, row-major, in
    /// native byte order, as [`Tensor::as_bytes`] lays them out. A buffer
    /// larger than needed keeps its extra bytes; one too small fails the
    /// run with [`Error::OutputBuffer`] (before anything runs when the plan
    /// knows the output's shape), leaving [`shape`](Self::shape) and
    /// [`dtype`](Self::dtype) set to what the output needs. Strings cannot
    /// be written to bytes ([`Error::UnsupportedType`]).
    pub fn bind(&mut self, name: &str, buffer: &'buf mut [u8]) -> &mut Self {
        self.entry(name).buffer = Some(buffer);
        self
    }

    /// The new tensor of a [`select`](Self::select)ed output after a run.
    pub fn get(&self, name: &str) -> Option<&Tensor> {
        self.find(name)?.result.as_ref()
    }

    /// Takes the new tensor of a selected output out of the run's results.
    pub fn take(&mut self, name: &str) -> Option<Tensor> {
        self.entries
            .iter_mut()
            .find(|e| e.name == name)?
            .result
            .take()
    }

    /// The shape of a chosen output after a run (selected or bound).
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.find(name)?.shape.as_deref()
    }

    /// The element type of a chosen output after a run.
    pub fn dtype(&self, name: &str) -> Option<DType> {
        self.find(name)?.dtype
    }

    /// The chosen outputs' names, in the order they were chosen.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    fn find(&self, name: &str) -> Option<&Entry<'buf>> {
        self.entries.iter().find(|e| e.name == name)
    }

    fn entry(&mut self, name: &str) -> &mut Entry<'buf> {
        let i = match self.entries.iter().position(|e| e.name == name) {
            Some(i) => i,
            None => {
                self.entries.push(Entry {
                    name: name.to_string(),
                    buffer: None,
                    result: None,
                    dtype: None,
                    shape: None,
                });
                self.entries.len() - 1
            }
        };
        &mut self.entries[i]
    }
}

impl Session {
    /// Runs the model on shared inputs, computing only the outputs chosen
    /// in `outputs` (all when none is) and writing bound ones into their
    /// buffers.
    ///
    /// Inputs are read in place, not copied (a tensor not laid out
    /// row-major is the exception): the run holds a reference to each
    /// until it returns, so an app can reuse its input tensors frame after
    /// frame (`Arc::get_mut` succeeds again once the run is over). Output
    /// selection prunes the plan: nodes that no chosen output needs do not
    /// run. A plan is kept per input shapes and selection. Bound outputs
    /// are written when the run has finished; on any error no buffer is
    /// written and earlier results are cleared.
    pub fn run_bound<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Arc<Tensor>)>,
        outputs: &mut Outputs<'_>,
        options: &RunOptions,
    ) -> Result<RunReport> {
        let _active = self.sched.monitor().activity();
        if outputs.entries.is_empty() {
            for info in &self.outputs {
                outputs.select(&info.name);
            }
        }
        for e in &mut outputs.entries {
            e.result = None;
            e.dtype = None;
            e.shape = None;
        }
        let chosen = self.resolve(outputs)?;
        let mut selected: Vec<usize> = chosen.clone();
        selected.sort_unstable();
        selected.dedup();
        let all = selected.len() == self.outputs.len();
        let bound = self
            .bind_shared(inputs)?
            .into_iter()
            .map(Value::Tensor)
            .collect();
        let check = |plan: &Plan| check_buffers(plan, &mut *outputs, &chosen, &selected);
        let (results, report) =
            self.execute(bound, (!all).then_some(&selected[..]), options, check)?;
        let results: Vec<Tensor> = results
            .into_iter()
            .map(|v| {
                let t = v.into_tensor("a bound output")?;
                let t = Arc::try_unwrap(t).unwrap_or_else(|shared| (*shared).clone());
                Ok(t.into_standard_layout())
            })
            .collect::<Result<_>>()?;
        // Check every buffer before writing any, so a failure writes none.
        for (e, &i) in outputs.entries.iter_mut().zip(&chosen) {
            let t = &results[position(&selected, i)];
            e.dtype = Some(t.dtype());
            e.shape = Some(t.shape().to_vec());
            if let Some(buf) = &e.buffer {
                fits(&e.name, t.dtype(), t.shape(), buf.len())?;
            }
        }
        for (e, &i) in outputs.entries.iter_mut().zip(&chosen) {
            let t = &results[position(&selected, i)];
            match &mut e.buffer {
                Some(buf) => {
                    let bytes = t.as_bytes().ok_or_else(|| strings(&e.name))?;
                    buf[..bytes.len()].copy_from_slice(bytes);
                }
                None => e.result = Some(t.clone()),
            }
        }
        Ok(report)
    }

    /// The model-output index of each chosen output, in the entries' order.
    fn resolve(&self, outputs: &Outputs<'_>) -> Result<Vec<usize>> {
        outputs
            .entries
            .iter()
            .map(|e| {
                self.outputs
                    .iter()
                    .position(|o| o.name == e.name)
                    .ok_or_else(|| Error::UnknownOutput {
                        name: e.name.clone(),
                        expected: self.outputs.iter().map(|o| o.name.clone()).collect(),
                    })
            })
            .collect()
    }
}

/// Where model output `i` is among the plan's (sorted, selected) outputs.
fn position(selected: &[usize], i: usize) -> usize {
    selected.binary_search(&i).unwrap_or(0)
}

/// Refuses, before running, a buffer that the plan's known output shape
/// does not fit (or a string output bound to bytes); the output's type and
/// shape are then left in `outputs` for the caller to size a new buffer.
fn check_buffers(
    plan: &Plan,
    outputs: &mut Outputs<'_>,
    chosen: &[usize],
    selected: &[usize],
) -> Result<()> {
    for (e, &i) in outputs.entries.iter_mut().zip(chosen) {
        let Some(buf) = &e.buffer else { continue };
        let id = plan.graph.outputs[position(selected, i)];
        let Some(fact) = plan.facts[id].as_ref() else {
            continue;
        };
        if fact.dtype == DType::String {
            return Err(strings(&e.name));
        }
        if let Some(shape) = &fact.shape {
            let capacity = buf.len();
            e.dtype = Some(fact.dtype);
            e.shape = Some(shape.clone());
            fits(&e.name, fact.dtype, shape, capacity)?;
        }
    }
    Ok(())
}

/// An error unless `capacity` bytes hold a `dtype` tensor of `shape`.
fn fits(name: &str, dtype: DType, shape: &[usize], capacity: usize) -> Result<()> {
    if dtype == DType::String {
        return Err(strings(name));
    }
    let needed = shape
        .iter()
        .try_fold(dtype.size_of(), |n, &d| n.checked_mul(d))
        .unwrap_or(usize::MAX);
    if needed > capacity {
        return Err(Error::OutputBuffer {
            name: name.to_string(),
            dtype: dtype.to_string(),
            shape: shape.to_vec(),
            needed,
            capacity,
        });
    }
    Ok(())
}

fn strings(name: &str) -> Error {
    Error::UnsupportedType(format!(
        "output {name:?} holds strings, which cannot be written to a byte buffer; select it instead"
    ))
}
