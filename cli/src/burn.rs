//! Background load for experiments: busy processes that spin for a bounded
//! time, started and stopped by `ramify bench --background-load K`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Spins on one core until `seconds` have passed (the `burn` subcommand).
pub fn spin(seconds: f64) {
    let end = Instant::now() + Duration::from_secs_f64(seconds.clamp(0.0, 3600.0));
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..100_000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
}

/// K busy processes, killed when dropped.
pub struct Burners(Vec<Child>);

impl Burners {
    /// Starts `k` busy processes that stop by themselves after `limit`.
    pub fn start(k: usize, limit: Duration) -> std::io::Result<Burners> {
        let exe = std::env::current_exe()?;
        let mut children = Vec::with_capacity(k);
        for _ in 0..k {
            children.push(
                Command::new(&exe)
                    .args(["burn", "--seconds", &format!("{}", limit.as_secs_f64())])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .spawn()?,
            );
        }
        // Let the scheduler and the load monitor see them.
        std::thread::sleep(Duration::from_millis(if k > 0 { 300 } else { 0 }));
        Ok(Burners(children))
    }
}

impl Drop for Burners {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
