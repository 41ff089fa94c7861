//! Concatenations without copies. Where a node's output is its inputs laid
//! end to end ([`Operator::joins_inputs`]: a Concat along the channels at
//! batch 1, as in every Inception and SqueezeNet block), an input whose
//! producer can write into part of a buffer ([`Operator::writes_into`]: a
//! Conv) and that nothing else reads is written by its producer straight
//! into its part of the joined output. The joining node then copies only
//! the inputs no producer placed, and hands on the buffer. Siblings that
//! run in parallel write their disjoint parts of one buffer at once.
//!
//! The plan finds the joins ([`Joins::find`]); a run's buffers live in its
//! value store ([`Buffers`]) from the first placed write until the joining
//! node, which runs after every producer of its inputs, takes them.

use crate::error::{Error, Result};
use crate::graph::{Graph, ValueId};
use crate::ir::{Fact, Kind, Operator};
use crate::tensor::recycle::{self, Recycled};
use crate::tensor::{DType, Tensor};
use std::sync::Mutex;

/// Where a placed producer writes: its part of join `join`'s buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The join (index into a run's [`Buffers`]).
    pub join: usize,
    /// First element of the part.
    pub offset: usize,
    /// Elements in the part.
    pub len: usize,
    /// Elements in the whole joined output.
    pub total: usize,
}

/// A joining node: its output's shape and, per input, where that input
/// lies in the output and whether its producer writes it there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    /// The join's index into a run's [`Buffers`].
    pub id: usize,
    /// The output's shape.
    pub shape: Vec<usize>,
    /// Per input: (first element, elements) in the output.
    pub parts: Vec<(usize, usize)>,
    /// Per input: whether its producer writes its part.
    pub placed: Vec<bool>,
}

/// The plan's joins: per node, the part it writes (a placed producer) or
/// the join it completes (a joining node).
#[derive(Debug, Default)]
pub struct Joins {
    parts: Vec<Option<Part>>,
    joins: Vec<Option<Join>>,
    count: usize,
}

/// A known float32 tensor fact's shape.
fn f32_shape(fact: Option<&Fact>) -> Option<&[usize]> {
    let f = fact?;
    if f.dtype != DType::F32 || f.kind != Kind::Tensor {
        return None;
    }
    f.shape.as_deref()
}

impl Joins {
    /// Finds the joins of `graph` (nodes in execution order) with value
    /// facts `facts`, read `uses` times each; nodes whose outputs are
    /// checked at run time (`check_at_run`) take no part.
    pub fn find(
        graph: &Graph,
        facts: &[Option<Fact>],
        uses: &[u32],
        check_at_run: &[bool],
    ) -> Joins {
        let nodes = &graph.nodes;
        let mut producer = vec![None; graph.values.len()];
        for (i, n) in nodes.iter().enumerate() {
            for &o in n.outputs.iter().flatten() {
                producer[o] = Some(i);
            }
        }
        let fact = |id: Option<ValueId>| id.and_then(|id| facts.get(id)?.as_ref());
        let mut out = Joins {
            parts: vec![None; nodes.len()],
            joins: vec![None; nodes.len()],
            count: 0,
        };
        for (index, node) in nodes.iter().enumerate() {
            let ins: Vec<Option<&Fact>> = node.inputs.iter().map(|&i| fact(i)).collect();
            let [Some(output)] = node.outputs[..] else {
                continue;
            };
            if check_at_run[index]
                || node.op.uses_values()
                || f32_shape(fact(Some(output))).is_none()
                || !node.op.joins_inputs(&ins)
            {
                continue;
            }
            let mut parts = Vec::with_capacity(ins.len());
            let mut offset = 0usize;
            for f in &ins {
                let Some(len) = f32_shape(*f).map(|s| s.iter().product::<usize>()) else {
                    break;
                };
                parts.push((offset, len));
                offset += len;
            }
            if parts.len() != ins.len() {
                continue;
            }
            let placed: Vec<bool> = node
                .inputs
                .iter()
                .map(|&id| {
                    let Some((id, p)) = id.and_then(|id| Some((id, producer[id]?))) else {
                        return false;
                    };
                    let pn = &nodes[p];
                    let pins: Vec<Option<&Fact>> = pn.inputs.iter().map(|&i| fact(i)).collect();
                    uses[id] == 1
                        && out.parts[p].is_none()
                        && !check_at_run[p]
                        && !pn.op.uses_values()
                        && pn.outputs.iter().flatten().count() == 1
                        && pn.outputs.first() == Some(&Some(id))
                        && pn.op.writes_into(&pins)
                })
                .collect();
            if !placed.contains(&true) {
                continue;
            }
            let (id, total) = (out.count, offset);
            out.count += 1;
            for (k, &input) in node.inputs.iter().enumerate() {
                if let (true, Some(v)) = (placed[k], input) {
                    if let Some(p) = producer[v] {
                        let (offset, len) = parts[k];
                        out.parts[p] = Some(Part {
                            join: id,
                            offset,
                            len,
                            total,
                        });
                    }
                }
            }
            let shape = f32_shape(fact(Some(output))).map(<[usize]>::to_vec);
            out.joins[index] = shape.map(|shape| Join {
                id,
                shape,
                parts,
                placed,
            });
        }
        out
    }

    /// The part node `index` writes, if it is a placed producer.
    pub fn part(&self, index: usize) -> Option<Part> {
        self.parts.get(index).copied().flatten()
    }

    /// The join node `index` completes, if it is a joining node.
    pub fn join(&self, index: usize) -> Option<&Join> {
        self.joins.get(index)?.as_ref()
    }

    /// How many joins the plan has.
    pub fn count(&self) -> usize {
        self.count
    }
}

/// The joined outputs of one run while their producers fill them.
#[derive(Debug, Default)]
pub struct Buffers {
    slots: Vec<Mutex<Option<Vec<f32>>>>,
}

impl Buffers {
    /// Empty buffers for `count` joins.
    pub fn new(count: usize) -> Buffers {
        Buffers {
            slots: (0..count).map(|_| Mutex::new(None)).collect(),
        }
    }

    fn slot(&self, join: usize) -> Result<std::sync::MutexGuard<'_, Option<Vec<f32>>>> {
        let slot = self
            .slots
            .get(join)
            .ok_or_else(|| Error::Internal(format!("join {join} has no buffer")))?;
        // A poisoned slot only means another writer panicked; the buffer is intact.
        Ok(slot.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs `op` (a placed producer) on `args`, its output going to `part`
    /// of the join's buffer (taken from the pools by the first producer of
    /// the run): written there by the operator, or copied there from the
    /// output it computed apart.
    pub fn write_part(
        &self,
        op: &dyn Operator,
        args: &[Option<&Tensor>],
        part: Part,
    ) -> Result<()> {
        let start = {
            let mut slot = self.slot(part.join)?;
            let buf = slot.get_or_insert_with(|| f32::take_buffer(part.total));
            if buf.len() != part.total || part.offset + part.len > part.total {
                return Err(Error::Internal(
                    "a joined output's buffer has the wrong length".into(),
                ));
            }
            // The vector stays in the slot (its storage does not move)
            // until the joining node takes it; no reference to its
            // elements is made here.
            buf.as_mut_ptr()
        };
        // SAFETY: the buffer holds `total` elements and the part lies
        // within it (checked above); the plan gives each producer of a
        // join its own part, disjoint from the others, so no two writers
        // (parallel siblings included) touch the same element; and the
        // buffer is neither read, moved nor freed until the joining node
        // takes it, which runs after every producer of its inputs (and a
        // failed run drops the store only after its forks have joined).
        let out = unsafe { std::slice::from_raw_parts_mut(start.add(part.offset), part.len) };
        if let Some(outs) = op.run_into(args, out)? {
            let t = outs
                .into_iter()
                .next()
                .ok_or_else(|| Error::Internal("a producer gave no output".into()))?;
            match &t {
                Tensor::F32(a) if a.len() == out.len() => {
                    for (o, &v) in out.iter_mut().zip(a.iter()) {
                        *o = v;
                    }
                }
                _ => {
                    return Err(Error::Internal(format!(
                        "a joined input is {} {:?}, expected float32 of {} elements",
                        t.dtype(),
                        t.shape(),
                        out.len()
                    )))
                }
            }
            recycle::recycle(t);
        }
        Ok(())
    }

    /// The joined output of `join`: its buffer, with the inputs that no
    /// producer placed (`inputs[k]` for unplaced input `k`) copied in.
    pub fn complete(&self, join: &Join, inputs: &[Option<&Tensor>]) -> Result<Tensor> {
        let mut buf = self
            .slot(join.id)?
            .take()
            .ok_or_else(|| Error::Internal("a joined output was never started".into()))?;
        for (k, &(offset, len)) in join.parts.iter().enumerate() {
            if join.placed[k] {
                continue;
            }
            let t = inputs
                .get(k)
                .copied()
                .flatten()
                .ok_or_else(|| Error::Internal(format!("joined input {k} is missing")))?;
            let dst = &mut buf[offset..offset + len];
            match t {
                Tensor::F32(a) if a.len() == len => match a.as_slice() {
                    Some(s) => dst.copy_from_slice(s),
                    None => dst.iter_mut().zip(a.iter()).for_each(|(o, &v)| *o = v),
                },
                _ => {
                    return Err(Error::Internal(format!(
                        "joined input {k} is {} {:?}, expected float32 of {len} elements",
                        t.dtype(),
                        t.shape()
                    )))
                }
            }
        }
        Tensor::from_vec(&join.shape, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::InferInput;

    /// An operator that cannot write into a buffer: it returns a fixed
    /// tensor, which the join copies into place.
    #[derive(Debug)]
    struct Fixed(Tensor);

    impl Operator for Fixed {
        fn infer(&self, _inputs: &[InferInput]) -> Result<Vec<Fact>> {
            Ok(vec![Fact::of(&self.0)])
        }
        fn flops(&self, _inputs: &[Option<&Fact>], _outputs: &[Fact]) -> u64 {
            1
        }
        fn run(&self, _inputs: &[Option<&Tensor>]) -> Result<Vec<Tensor>> {
            Ok(vec![self.0.clone()])
        }
    }

    /// Elements 2..5 of join 0's five.
    const PART: Part = Part {
        join: 0,
        offset: 2,
        len: 3,
        total: 5,
    };

    /// Join 0: an unplaced input of 2 elements, then PART.
    fn join_of_two() -> Join {
        Join {
            id: 0,
            shape: vec![1, 5],
            parts: vec![(0, 2), (2, 3)],
            placed: vec![false, true],
        }
    }

    fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_vec(shape, v.to_vec()).unwrap()
    }

    /// A producer's output computed apart is copied into its part; the
    /// unplaced input is copied in by `complete`; the buffer becomes the
    /// output of the join's shape.
    #[test]
    fn parts_computed_apart_and_unplaced_inputs_are_copied_in() {
        let join = join_of_two();
        let buffers = Buffers::new(1);
        let producer = Fixed(f32s(&[1, 3], &[3.0, 4.0, 5.0]));
        buffers.write_part(&producer, &[], PART).unwrap();
        let first = f32s(&[1, 2], &[1.0, 2.0]);
        let out = buffers.complete(&join, &[Some(&first), None]).unwrap();
        assert_eq!(out, f32s(&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]));
        // The buffer went with the output: a second completion has none.
        assert!(matches!(
            buffers.complete(&join, &[Some(&first), None]),
            Err(Error::Internal(_))
        ));
    }

    /// Outputs that do not fit their part are errors, not panics.
    #[test]
    fn a_part_of_the_wrong_size_or_type_is_an_error() {
        let buffers = Buffers::new(1);
        let short = Fixed(f32s(&[1, 2], &[3.0, 4.0]));
        assert!(matches!(
            buffers.write_part(&short, &[], PART),
            Err(Error::Internal(_))
        ));
        let ints = Fixed(Tensor::from_vec(&[3], vec![1i32, 2, 3]).unwrap());
        assert!(matches!(
            buffers.write_part(&ints, &[], PART),
            Err(Error::Internal(_))
        ));
        let beyond = Part { offset: 4, ..PART };
        let fits = Fixed(f32s(&[3], &[1.0, 2.0, 3.0]));
        assert!(matches!(
            buffers.write_part(&fits, &[], beyond),
            Err(Error::Internal(_))
        ));
        assert!(matches!(
            buffers.write_part(&fits, &[], Part { join: 1, ..PART }),
            Err(Error::Internal(_))
        ));
        // An unplaced input of the wrong length.
        let join = join_of_two();
        let wrong = f32s(&[1, 3], &[1.0, 2.0, 3.0]);
        assert!(matches!(
            buffers.complete(&join, &[Some(&wrong), None]),
            Err(Error::Internal(_))
        ));
    }
}
