//! Command-line options shared by `run`, `bench` and `inspect`: the CPU
//! limit, the scheduling mode, the policy's thresholds and presets, the
//! memory budget, the time limit and the placement; and the deadline of `run` and `bench`.

use clap::Args;
use ramify::{Mode, SessionBuilder};

#[derive(Args, Clone, Debug)]
pub struct SchedArgs {
    /// CPUs the session may use (default: all); at most the CPUs this
    /// process may run on, unless --oversubscribe.
    #[arg(long, alias = "threads")]
    pub cpus: Option<usize>,
    /// Let --cpus exceed the CPUs this process may run on (more threads
    /// than CPUs).
    #[arg(long)]
    pub oversubscribe: bool,
    /// Run the session's threads only on these CPUs (comma-separated, as
    /// the OS numbers them, e.g. a phone's big cores: 4,5,6,7).
    #[arg(long, value_delimiter = ',', value_name = "CPU,...")]
    pub cpu_set: Option<Vec<usize>>,
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
    /// The memory budget: no tensor, nor the values a run holds at once, may
    /// exceed it (bytes, or with a unit: 512M, 2G, 1.5GiB; default: half of
    /// the physical memory).
    #[arg(long, value_parser = parse_bytes)]
    pub memory_limit: Option<usize>,
    /// The longest, in milliseconds, that loading or one run may take: past
    /// it the run stops with a deadline error (default: no limit).
    #[arg(long, value_name = "MS")]
    pub time_limit: Option<f64>,
    #[command(flatten)]
    pub placement: crate::placement::PlacementArgs,
}

impl SchedArgs {
    /// A session builder with these options.
    pub fn builder(&self) -> SessionBuilder {
        let mut b = self.placement.apply(SessionBuilder::new().mode(self.mode));
        b = b.oversubscribe(self.oversubscribe);
        if let Some(n) = self.cpus {
            b = b.cpus(n);
        }
        if let Some(set) = &self.cpu_set {
            b = b.cpu_set(set.iter().copied());
        }
        // Unset thresholds and presets take the library's defaults for the
        // CPU limit the session applies.
        if let Some(t) = self.theta1 {
            b = b.theta1(t);
        }
        if let Some(t) = self.theta2 {
            b = b.theta2(t);
        }
        if let Some(m) = self.m1 {
            b = b.m1(m);
        }
        if let Some(m) = self.m2 {
            b = b.m2(m);
        }
        if self.no_pin {
            b = b.pin_threads(false);
        }
        if self.no_makespan_check {
            b = b.makespan_check(false);
        }
        if let Some(bytes) = self.memory_limit {
            b = b.memory_limit(bytes);
        }
        if let Some(ms) = self.time_limit {
            b = b.time_limit(std::time::Duration::from_secs_f64(
                ms.clamp(0.0, 1e12) / 1e3,
            ));
        }
        b
    }
}

/// Per-run options of `run` and `bench`: the deadline (seed 000) and the
/// int8 micro-kernel with its overflow guard (seed 001).
#[derive(Args, Clone, Debug)]
pub struct DeadlineArgs {
    /// The time each run is planned to take, in milliseconds: a run that
    /// cannot finish within it × the delay ratio stops early with a
    /// deadline error (`bench` counts these misses).
    #[arg(long, value_name = "MS")]
    pub deadline: Option<f64>,
    /// How far past the deadline a run may go (default 1.5: 150 %).
    #[arg(long, value_name = "R", requires = "deadline")]
    pub delay_ratio: Option<f64>,
    /// The int8 micro-kernel: auto (the fastest exact one), vnni, narrow
    /// (AVX2 i16 pair sums, guarded against saturation) or portable.
    #[arg(long, default_value = "auto", value_parser = parse_int8_kernel)]
    pub int8_kernel: ramify::Int8Kernel,
    /// Do not recompute the narrow kernel's saturated tiles (shows the
    /// wrong results the guard prevents).
    #[arg(long)]
    pub no_int8_guard: bool,
}

fn parse_int8_kernel(text: &str) -> Result<ramify::Int8Kernel, String> {
    use ramify::Int8Kernel::*;
    Ok(match text {
        "auto" => Auto,
        "vnni" => Vnni,
        "narrow" => Narrow,
        "portable" => Portable,
        _ => return Err(format!("{text}: expected auto, vnni, narrow or portable")),
    })
}

impl DeadlineArgs {
    /// Run options with this deadline.
    pub fn options(&self) -> anyhow::Result<ramify::RunOptions> {
        let mut o = ramify::RunOptions::new();
        if let Some(ms) = self.deadline {
            if !(ms.is_finite() && ms >= 0.0) {
                anyhow::bail!("--deadline must be a number of milliseconds, not {ms}");
            }
            o = o.deadline(std::time::Duration::from_secs_f64(ms.min(1e12) / 1e3));
        }
        if let Some(r) = self.delay_ratio {
            o = o.delay_ratio(r);
        }
        Ok(o.int8(ramify::Int8Settings {
            kernel: self.int8_kernel,
            guard: !self.no_int8_guard,
        }))
    }
}

/// Parses a byte count: a number with an optional unit (K, M, G, T, with or
/// without `B` or `iB`, all powers of 1024).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a byte count (e.g. 512M, 2G)"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use K, M, G or T)"
            ))
        }
    };
    let bytes = number * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < usize::MAX as f64) {
        return Err(format!("{text:?} is not a usable memory limit"));
    }
    Ok(bytes as usize)
}

#[cfg(test)]
mod tests {
    use super::parse_bytes;

    #[test]
    fn byte_counts_take_binary_units() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("2GiB"), Ok(2 << 30));
        assert_eq!(parse_bytes("1.5g"), Ok(3 << 29));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("12X").is_err());
        assert!(parse_bytes("lots").is_err());
    }
}
