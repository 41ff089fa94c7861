//! The values of one run in flight: each slot is written once by its producer
//! and released after its last reader, so intermediate tensors are freed as
//! early as possible. Slots are individually locked so that parallel siblings
//! can read and write their own values concurrently. Freed values go to
//! the buffer pools (`tensor::recycle`) for later outputs to reuse. A slot
//! holds a [`Value`]: a tensor (shared as before, no extra allocation), or a
//! sequence or optional. The store also holds the run's joined outputs
//! while the producers of their parts write them (`joins`).

use super::joins::Buffers;
use super::Plan;
use crate::graph::ValueId;
use crate::ir::Value;
use crate::tensor::recycle;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The values of one run.
pub struct ValueStore {
    slots: Vec<Mutex<Option<Value>>>,
    remaining: Vec<AtomicU32>,
    /// The plan's joined outputs while their producers write them.
    pub(super) joined: Buffers,
}

impl ValueStore {
    /// An empty store for `plan`'s values.
    pub fn new(plan: &Plan) -> ValueStore {
        ValueStore {
            slots: (0..plan.uses.len()).map(|_| Mutex::new(None)).collect(),
            remaining: plan.uses.iter().map(|&u| AtomicU32::new(u)).collect(),
            joined: Buffers::new(plan.joins.count()),
        }
    }

    fn slot(&self, id: ValueId) -> std::sync::MutexGuard<'_, Option<Value>> {
        // A poisoned slot only means another reader panicked; the data is intact.
        self.slots[id].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores a value (recycled at once if nothing reads it).
    pub fn put(&self, id: ValueId, t: Value) {
        if self.remaining[id].load(Ordering::Acquire) > 0 {
            *self.slot(id) = Some(t);
        } else {
            give_back(t);
        }
    }

    /// The value, if present.
    pub fn get(&self, id: ValueId) -> Option<Value> {
        self.slot(id).clone()
    }

    /// Whether exactly one read of `id` is left (the caller's).
    pub fn is_last_read(&self, id: ValueId) -> bool {
        self.remaining[id].load(Ordering::Acquire) == 1
    }

    /// Marks the last read of `id` done and hands its value to the caller
    /// instead of freeing it.
    pub fn take(&self, id: ValueId) -> Option<Value> {
        if self.remaining[id].fetch_sub(1, Ordering::AcqRel) == 1 {
            self.slot(id).take()
        } else {
            self.slot(id).clone()
        }
    }

    /// Marks one read of `id` done; frees the value after its last read.
    pub fn release(&self, id: ValueId) {
        if self.remaining[id].fetch_sub(1, Ordering::AcqRel) == 1 {
            let freed = self.slot(id).take();
            if let Some(t) = freed {
                give_back(t);
            }
        }
    }
}

/// Hands a freed value's storage to the buffer pools when no one else holds
/// it (a graph output or a constant is never recycled while in use).
fn give_back(v: Value) {
    if let Value::Tensor(t) = v {
        if let Ok(t) = Arc::try_unwrap(t) {
            recycle::recycle(t);
        }
    }
}
