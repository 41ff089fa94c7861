//! Graph analysis for the scheduler: the sibling subgraphs under every fork
//! (and the execution step tree built from them), and the cost model that
//! estimates each sibling's single-thread time from operator FLOPs.

mod calibrate;
mod cost;
mod dominators;
mod partition;
mod siblings;

pub use calibrate::{cached as calibrated_cost_model, calibrate, done as calibration_done};
pub use cost::{CostModel, OpClass};
pub use partition::{
    initial_split, partition, refine, Critical, CutStats, Iteration, Move, Partition,
    PartitionOptions, Refinement, Task, TaskEdge, TaskGraph,
};
pub use siblings::{find_structure, Fork, Sibling, Step, Structure};
