//! Test support: a child process that spins on a CPU, the competitor the
//! load tests measure. It is killed and reaped when dropped, so a failing
//! assertion never leaves it running.

use std::process::{Child, Command};
use std::time::Duration;

/// A spinning `sh` child; killed when dropped.
pub(crate) struct SpinningChild(Child);

impl SpinningChild {
    /// Starts the child and gives it 50 ms to become runnable; `None` where
    /// no shell can be started.
    pub(crate) fn start() -> Option<Self> {
        let child = Command::new("sh")
            .arg("-c")
            .arg("while :; do :; done")
            .spawn()
            .ok()?;
        std::thread::sleep(Duration::from_millis(50));
        Some(Self(child))
    }

    /// Kills and reaps the child now.
    pub(crate) fn stop(self) {}
}

impl Drop for SpinningChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
