//! Reading Linux sysfs (Android included): the root to read (`/sys`, or a
//! simulated device named by `RAMIFY_SYSFS_ROOT`), small text files, numbered
//! entries and the kernel's CPU-list format (`0-3,6`). Missing or unreadable
//! files read as nothing.

use std::fs;
use std::path::{Path, PathBuf};

/// The environment variable naming another sysfs root (a simulated device
/// for tests and experiments).
pub const SYSFS_ROOT_VAR: &str = "RAMIFY_SYSFS_ROOT";

/// The sysfs root read: `$RAMIFY_SYSFS_ROOT`, else `/sys`.
pub fn sysfs_root() -> PathBuf {
    std::env::var_os(SYSFS_ROOT_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// A file's text, trimmed; `None` when it cannot be read.
pub fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A file holding one finite number.
pub fn read_number(path: &Path) -> Option<f64> {
    read_trimmed(path)?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
}

/// The entries of `dir` whose names start with `prefix`, sorted by name.
pub fn entries(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    crate::order::sort_by(&mut found, |a, b| a.cmp(b));
    found
}

/// The number after `prefix` in a file name (`cpu12` → 12).
pub fn index_after(path: &Path, prefix: &str) -> Option<usize> {
    path.file_name()?
        .to_str()?
        .strip_prefix(prefix)?
        .parse()
        .ok()
}

/// The most CPUs a list may name: far beyond any device, and small enough
/// that a hostile `0-4000000000` cannot exhaust memory.
pub const MAX_CPUS: usize = 4096;

/// Parses the kernel's CPU-list format (`0-3,6,8-9`), sorted and without
/// repeats; `None` when malformed or naming a CPU at or past [`MAX_CPUS`].
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let c: usize = part.parse().ok()?;
                (c, c)
            }
        };
        if lo > hi || hi >= MAX_CPUS {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("7"), Some(vec![7]));
        assert_eq!(parse_cpu_list("4-5,4"), Some(vec![4, 5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        for bad in ["3-1", "a", "0-", "0-4000000000", "-1"] {
            assert_eq!(parse_cpu_list(bad), None, "{bad}");
        }
    }

    #[test]
    fn numbered_names() {
        assert_eq!(index_after(Path::new("/x/cpu12"), "cpu"), Some(12));
        assert_eq!(index_after(Path::new("/x/cpufreq"), "cpu"), None);
        assert_eq!(index_after(Path::new("/x/policy4"), "policy"), Some(4));
    }
}
