//! Batches: several input sets in one call, one after another, under one
//! deadline (seed 000's task of many samples). Each item gets its fair share
//! of the time left; when an item cannot finish in it, or the batch is
//! cancelled, the batch stops and returns what finished with the indices
//! that did not, for the app to hand to another session (a lighter model,
//! other cores): the seed's hand-over of the remaining work.

use super::{RunOptions, Session};
use crate::error::{Error, Result};
use crate::exec::RunEvent;
use crate::sched::GroupedWork;
use crate::tensor::Tensor;
use std::time::Instant;

/// The named outputs of one item, or the error that failed it.
pub type ItemResult = Result<Vec<(String, Tensor)>>;

/// The outcome of [`Session::run_batch`].
#[derive(Debug)]
pub struct BatchResult {
    /// Per item, in order: its outputs or its own error (a wrong input
    /// fails its item alone); `None` for the items that did not run.
    pub items: Vec<Option<ItemResult>>,
    /// The items that did not run to completion, to hand over: the one
    /// that was stopped and all after it.
    pub unfinished: Vec<usize>,
    /// Why the batch stopped early ([`Error::Deadline`] or
    /// [`Error::Cancelled`]), if it did.
    pub stopped: Option<Error>,
    /// The events of all its runs, in order.
    pub events: Vec<RunEvent>,
}

impl BatchResult {
    /// The outputs of the items that finished, with their indices.
    pub fn finished(&self) -> impl Iterator<Item = (usize, &Vec<(String, Tensor)>)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.as_ref()?.as_ref().ok()?)))
    }
}

impl Session {
    /// Runs the model on each input set in turn, under `options` for the
    /// whole batch: its deadline (× delay ratio) and time limit bound the
    /// batch, each item getting an equal share of the time left; its
    /// cancellation token stops the batch at the next operator; its
    /// progress counts items as well as operators; its callback sees the
    /// events of every item.
    ///
    /// ```no_run
    /// use ramify::{RunOptions, Session, Tensor};
    /// use std::time::Duration;
    /// let session = Session::from_file("models/inception_mini.onnx")?;
    /// let frames: Vec<_> = (0..4)
    ///     .map(|_| vec![("input", Tensor::zeros(ramify::DType::F32, &[1, 3, 96, 96]))])
    ///     .collect();
    /// let result = session.run_batch(frames, &RunOptions::new().deadline(Duration::from_millis(100)));
    /// for (i, outputs) in result.finished() {
    ///     println!("frame {i}: {}", outputs[0].1);
    /// }
    /// if let Some(why) = &result.stopped {
    ///     println!("hand over frames {:?}: {why}", result.unfinished);
    /// }
    /// # Ok::<(), ramify::Error>(())
    /// ```
    pub fn run_batch<N, I>(
        &self,
        items: impl IntoIterator<Item = I>,
        options: &RunOptions,
    ) -> BatchResult
    where
        N: AsRef<str>,
        I: IntoIterator<Item = (N, Tensor)>,
    {
        let items: Vec<I> = items.into_iter().collect();
        let total = items.len();
        let work = GroupedWork { total, group: 1 };
        let start = Instant::now();
        let progress = options.progress.clone();
        let mut result = BatchResult {
            items: (0..total).map(|_| None).collect(),
            unfinished: Vec::new(),
            stopped: None,
            events: Vec::new(),
        };
        let rule = match options.rule() {
            Ok(rule) => rule,
            Err(e) => {
                result.unfinished = work.hand_over(0).collect();
                result.stopped = Some(e);
                return result;
            }
        };
        for (done, inputs) in items.into_iter().enumerate() {
            if let Some(p) = &progress {
                p.set_items(done, total);
            }
            let left = (total - done) as u32;
            let elapsed = start.elapsed();
            let mut item = options.clone();
            if let Some(limit) = options.time_limit {
                item.time_limit = Some(limit.saturating_sub(elapsed));
            }
            if let Some(rule) = rule {
                let share = rule.allowed().saturating_sub(elapsed) / left;
                item = item.deadline(share.div_f64(rule.delay_ratio));
            }
            match self.run_with_options(inputs, &item) {
                Ok((outputs, report)) => {
                    result.events.extend(report.events);
                    result.items[done] = Some(Ok(outputs));
                }
                Err(e) if e.is_interrupt() => {
                    result.unfinished = work.hand_over(done).collect();
                    result.stopped = Some(e);
                    break;
                }
                Err(e) => result.items[done] = Some(Err(e)),
            }
        }
        if let Some(p) = &progress {
            p.set_items(total - result.unfinished.len(), total);
        }
        result
    }
}
