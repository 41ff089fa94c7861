//! Command-line options shared by `run`, `bench` and `inspect`: the CPU
//! limit, the scheduling mode and the policy's thresholds and presets.

use clap::Args;
use ramify::{Mode, SessionBuilder};

#[derive(Args, Clone, Debug)]
pub struct SchedArgs {
    /// CPUs the session may use (default: all).
    #[arg(long, alias = "threads")]
    pub cpus: Option<usize>,
    /// adaptive (decide from load at each fork), serial, or parallel.
    #[arg(long, default_value = "adaptive")]
    pub mode: Mode,
    /// Threshold θ1: at or above this load, siblings run serially.
    #[arg(long)]
    pub theta1: Option<f64>,
    /// Threshold θ2: at or above this load, pools shrink to M1.
    #[arg(long)]
    pub theta2: Option<f64>,
    /// Preset M1: the shrunk pool size.
    #[arg(long)]
    pub m1: Option<usize>,
    /// Preset M2: threads per operator when serial.
    #[arg(long)]
    pub m2: Option<usize>,
    /// Do not pin pool threads to CPUs.
    #[arg(long)]
    pub no_pin: bool,
    /// In adaptive mode, follow the method's bands alone: fork whenever the
    /// band allows, even where parallel siblings are estimated to finish
    /// later than serial execution.
    #[arg(long)]
    pub no_makespan_check: bool,
}

impl SchedArgs {
    /// A session builder with these options.
    pub fn builder(&self) -> SessionBuilder {
        let mut b = SessionBuilder::new().mode(self.mode);
        let cpus = self.cpus.unwrap_or_else(num_cpus_all);
        b = b.cpus(cpus);
        let defaults = ramify::sched::PolicyConfig::for_cpus(cpus);
        if self.theta1.is_some() || self.theta2.is_some() {
            b = b.thresholds(
                self.theta1.unwrap_or(defaults.theta1),
                self.theta2.unwrap_or(defaults.theta2),
            );
        }
        if self.m1.is_some() || self.m2.is_some() {
            b = b.presets(
                self.m1.unwrap_or(defaults.m1),
                self.m2.unwrap_or(defaults.m2),
            );
        }
        if self.no_pin {
            b = b.pin_threads(false);
        }
        if self.no_makespan_check {
            b = b.makespan_check(false);
        }
        b
    }
}

fn num_cpus_all() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
