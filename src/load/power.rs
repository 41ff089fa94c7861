//! Battery level and thermal state from Linux sysfs (Android included):
//! `class/power_supply/*` of type `Battery` (`capacity`, in percent) and
//! `class/thermal/thermal_zone*` (`temp`, in millidegrees, against the
//! zone's `critical` trip point). Devices without the files report
//! nothing; the host application can push both instead.

use super::sysfs::{entries, read_number, read_trimmed};
use std::path::{Path, PathBuf};

/// A zone's temperature maps to 0 at this many millidegrees Celsius.
pub const COOL_MILLI_C: f64 = 40_000.0;
/// The critical temperature assumed where a zone names none.
pub const CRITICAL_MILLI_C: f64 = 100_000.0;

pub use super::sysfs::{sysfs_root, SYSFS_ROOT_VAR};

/// The battery and thermal files found under one sysfs root.
#[derive(Debug, Clone, Default)]
pub struct PowerFiles {
    batteries: Vec<PathBuf>,
    /// Each zone's `temp` file and its critical temperature.
    zones: Vec<(PathBuf, f64)>,
}

/// The critical trip temperature of a thermal zone, if it names one.
fn critical_of(zone: &Path) -> Option<f64> {
    (0..32).find_map(|i| {
        let kind = read_trimmed(&zone.join(format!("trip_point_{i}_type")))?;
        (kind == "critical")
            .then(|| read_number(&zone.join(format!("trip_point_{i}_temp"))))
            .flatten()
    })
}

impl PowerFiles {
    /// Finds the files under `root` (normally `/sys`).
    pub fn find(root: &Path) -> PowerFiles {
        let batteries = entries(&root.join("class/power_supply"), "")
            .into_iter()
            .filter(|p| read_trimmed(&p.join("type")).as_deref() == Some("Battery"))
            .map(|p| p.join("capacity"))
            .filter(|p| p.exists())
            .collect();
        let zones = entries(&root.join("class/thermal"), "thermal_zone")
            .into_iter()
            .filter(|z| z.join("temp").exists())
            .map(|z| {
                let critical = critical_of(&z)
                    .filter(|&c| c > COOL_MILLI_C)
                    .unwrap_or(CRITICAL_MILLI_C);
                (z.join("temp"), critical)
            })
            .collect();
        PowerFiles { batteries, zones }
    }

    /// Whether any file was found.
    pub fn is_empty(&self) -> bool {
        self.batteries.is_empty() && self.zones.is_empty()
    }

    /// The battery level in [0, 1]: the lowest of the batteries found.
    pub fn battery(&self) -> Option<f64> {
        self.batteries
            .iter()
            .filter_map(|p| read_number(p))
            .map(|pct| (pct / 100.0).clamp(0.0, 1.0))
            .reduce(f64::min)
    }

    /// The thermal state in [0, 1]: the hottest zone, 0 at 40 °C and 1 at
    /// its critical temperature.
    pub fn thermal(&self) -> Option<f64> {
        self.zones
            .iter()
            .filter_map(|(p, critical)| {
                let t = read_number(p)?;
                Some(((t - COOL_MILLI_C) / (critical - COOL_MILLI_C)).clamp(0.0, 1.0))
            })
            .reduce(f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    #[test]
    fn a_simulated_phone_tree() {
        let dir = std::env::temp_dir().join(format!("ramify-power-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        write(&dir, "class/power_supply/battery/type", "Battery\n");
        write(&dir, "class/power_supply/battery/capacity", "37\n");
        write(&dir, "class/power_supply/usb/type", "USB\n");
        write(&dir, "class/power_supply/usb/capacity", "100\n");
        // Zone 0: 55 °C against a critical trip of 115 °C -> 0.2.
        write(&dir, "class/thermal/thermal_zone0/temp", "55000\n");
        write(
            &dir,
            "class/thermal/thermal_zone0/trip_point_0_type",
            "passive\n",
        );
        write(
            &dir,
            "class/thermal/thermal_zone0/trip_point_0_temp",
            "90000\n",
        );
        write(
            &dir,
            "class/thermal/thermal_zone0/trip_point_1_type",
            "critical\n",
        );
        write(
            &dir,
            "class/thermal/thermal_zone0/trip_point_1_temp",
            "115000\n",
        );
        // Zone 1: 70 °C, no trip points: critical taken as 100 °C -> 0.5.
        write(&dir, "class/thermal/thermal_zone1/temp", "70000\n");
        let files = PowerFiles::find(&dir);
        assert!(!files.is_empty());
        assert_eq!(files.battery(), Some(0.37));
        assert!((files.thermal().unwrap() - 0.5).abs() < 1e-12);
        // Cooler than 40 °C is 0.
        write(&dir, "class/thermal/thermal_zone1/temp", "30000\n");
        assert!((files.thermal().unwrap() - 0.2).abs() < 1e-12);
        let _ = fs::remove_dir_all(&dir);
        // Nothing there: nothing reported.
        let none = PowerFiles::find(&dir);
        assert!(none.is_empty());
        assert_eq!((none.battery(), none.thermal()), (None, None));
    }
}
