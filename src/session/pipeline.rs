//! Pipelined execution of a partitioned model: one session per part, each on
//! CPUs of its own, run as stages over a stream of inputs. Stages hand each
//! item on through bounded queues, so items leave in the order they came and
//! at most a few wait between two stages; inside a stage the session's own
//! scheduler still decides at every fork.

use super::partition::Partitioned;
use super::{Outputs, RunOptions, Session, SessionBuilder};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};

/// The values one item carries from stage to stage, by name.
type Bag = HashMap<String, Arc<Tensor>>;

/// One stage: a part's session, what it reads and what the item keeps after it.
#[derive(Debug)]
struct Stage {
    session: Session,
    /// The CPUs the stage's session runs on.
    cpus: Vec<usize>,
    /// Values later stages read, and model outputs.
    keep: Vec<String>,
}

impl Stage {
    /// Runs the part on the bag's values and adds its outputs to the bag.
    fn run(&self, mut bag: Bag) -> Result<Bag> {
        let inputs = self
            .session
            .inputs()
            .iter()
            .map(|i| {
                let t = bag
                    .get(&i.name)
                    .ok_or_else(|| Error::MissingInput(i.name.clone()))?;
                Ok((i.name.clone(), Arc::clone(t)))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut outputs = Outputs::new();
        self.session
            .run_bound(inputs, &mut outputs, &RunOptions::default())?;
        for o in self.session.outputs() {
            let t = outputs
                .take(&o.name)
                .ok_or_else(|| Error::Internal(format!("stage output {:?} missing", o.name)))?;
            bag.insert(o.name.clone(), Arc::new(t));
        }
        bag.retain(|name, _| self.keep.contains(name));
        Ok(bag)
    }
}

/// A partitioned model run as a pipeline: stage `i` runs part `i` on CPUs of
/// its own, and a stream of inputs flows through the stages, so that while
/// one item is in part 1 the next is already in part 0.
///
/// ```
/// use ramify::analysis::{Critical, PartitionOptions};
/// use ramify::{Pipeline, SessionBuilder, Tensor};
/// use std::sync::Arc;
/// let options = PartitionOptions { parts: 2, ..PartitionOptions::default() };
/// let split = ramify::partition_model("models/inception_mini.onnx", &options, Critical::Path)?;
/// let pipeline = Pipeline::new(&split, &SessionBuilder::new(), &ramify::available_cpus())?;
/// let frame = Arc::new(Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]));
/// let frames = (0..4).map(|_| vec![("input".to_string(), Arc::clone(&frame))]);
/// let mut done = 0;
/// pipeline.run_stream(frames, |_, result| {
///     assert_eq!(result.unwrap()[0].1.shape(), &[1, 100]);
///     done += 1;
/// });
/// assert_eq!(done, 4);
/// # Ok::<(), ramify::Error>(())
/// ```
#[derive(Debug)]
pub struct Pipeline {
    stages: Vec<Stage>,
    outputs: Vec<String>,
    queue: usize,
}

impl Pipeline {
    /// Loads every part of `split` as a stage session configured by `base`,
    /// the stages sharing out `cpus` in order: with at least as many CPUs as
    /// stages, each stage gets a contiguous share of its own (the shares
    /// differ by at most one CPU); with fewer, stage `i` runs on CPU
    /// `cpus[i % len]`.
    pub fn new(split: &Partitioned, base: &SessionBuilder, cpus: &[usize]) -> Result<Pipeline> {
        if cpus.is_empty() {
            return Err(Error::Config("a pipeline needs at least one CPU".into()));
        }
        let k = split.parts.len();
        let shares = share_cpus(cpus, k);
        let mut stages = Vec::with_capacity(k);
        for (i, part) in split.parts.iter().enumerate() {
            let keep = split.parts[i + 1..]
                .iter()
                .flat_map(|p| p.inputs.iter())
                .chain(&split.outputs)
                .cloned()
                .collect();
            let session = base
                .clone()
                .cpus(shares[i].len())
                .cpu_set(shares[i].iter().copied())
                .build_from_bytes(&part.model)?;
            stages.push(Stage {
                session,
                cpus: shares[i].clone(),
                keep,
            });
        }
        Ok(Pipeline {
            stages,
            outputs: split.outputs.clone(),
            queue: 2,
        })
    }

    /// How many items may wait between two stages (default 2, at least 1).
    pub fn with_queue(mut self, items: usize) -> Pipeline {
        self.queue = items.max(1);
        self
    }

    /// The CPUs of each stage.
    pub fn stage_cpus(&self) -> Vec<Vec<usize>> {
        self.stages.iter().map(|s| s.cpus.clone()).collect()
    }

    /// Runs one input through every stage in turn on the calling thread and
    /// returns the model's outputs in its order.
    pub fn run<N: AsRef<str>>(
        &self,
        inputs: impl IntoIterator<Item = (N, Arc<Tensor>)>,
    ) -> Result<Vec<(String, Tensor)>> {
        let mut bag: Bag = inputs
            .into_iter()
            .map(|(n, t)| (n.as_ref().to_string(), t))
            .collect();
        for stage in &self.stages {
            bag = stage.run(bag)?;
        }
        self.finish(bag)
    }

    /// Runs a stream of inputs through the stages, each stage on a thread of
    /// its own, and hands `sink` each item's index and outputs (or its error)
    /// in input order on the calling thread. Returns how many items went
    /// through. An item that fails in one stage skips the later ones; the
    /// others go on.
    pub fn run_stream<I, F>(&self, inputs: I, mut sink: F) -> usize
    where
        I: IntoIterator<Item = Vec<(String, Arc<Tensor>)>>,
        I::IntoIter: Send,
        F: FnMut(usize, Result<Vec<(String, Tensor)>>),
    {
        type Item = (usize, Result<Bag>);
        let inputs = inputs.into_iter();
        std::thread::scope(|scope| {
            let (feed, mut queue) = sync_channel::<Item>(self.queue);
            scope.spawn(move || {
                for (i, named) in inputs.enumerate() {
                    if feed.send((i, Ok(named.into_iter().collect()))).is_err() {
                        break;
                    }
                }
            });
            for stage in &self.stages {
                let (next, out) = sync_channel::<Item>(self.queue);
                let input = Mutex::new(std::mem::replace(&mut queue, out));
                scope.spawn(move || {
                    let work = || {
                        let input = input.lock().unwrap_or_else(|e| e.into_inner());
                        for (i, bag) in input.iter() {
                            if next.send((i, bag.and_then(|b| stage.run(b)))).is_err() {
                                break;
                            }
                        }
                        Ok(())
                    };
                    // The loop runs on the stage session's own pool thread
                    // (pinned to the stage's CPUs), so no run is handed
                    // over between threads; without a pool it runs here.
                    if stage.session.on_pool(work).is_err() {
                        work().ok();
                    }
                });
            }
            let mut count = 0;
            for (i, bag) in queue {
                sink(i, bag.and_then(|b| self.finish(b)));
                count += 1;
            }
            count
        })
    }

    /// The model's outputs from a finished item's bag.
    fn finish(&self, mut bag: Bag) -> Result<Vec<(String, Tensor)>> {
        self.outputs
            .iter()
            .map(|name| {
                let t = bag
                    .remove(name)
                    .ok_or_else(|| Error::Internal(format!("output {name:?} missing")))?;
                Ok((
                    name.clone(),
                    Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone()),
                ))
            })
            .collect()
    }
}

/// Shares `cpus` out among `k` stages in order.
fn share_cpus(cpus: &[usize], k: usize) -> Vec<Vec<usize>> {
    if cpus.len() < k {
        return (0..k).map(|i| vec![cpus[i % cpus.len()]]).collect();
    }
    let mut shares = Vec::with_capacity(k);
    let mut start = 0;
    for i in 0..k {
        let len = (cpus.len() - start) / (k - i);
        shares.push(cpus[start..start + len].to_vec());
        start += len;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::share_cpus;

    #[test]
    fn cpus_are_shared_in_order_and_evenly() {
        assert_eq!(share_cpus(&[0, 1], 2), vec![vec![0], vec![1]]);
        assert_eq!(
            share_cpus(&[0, 1, 2, 3, 4], 2),
            vec![vec![0, 1], vec![2, 3, 4]]
        );
        assert_eq!(share_cpus(&[4, 5], 3), vec![vec![4], vec![5], vec![4]]);
    }
}
