//! The overflow guard of the int8 engine, after seed 001: aggregate in a narrow,
//! fast format; detect the overflow; recompute in the wide format.
//!
//! CPUs with AVX2 but no VNNI have no exact u8 × s8 dot product: the fast
//! instruction, `vpmaddubsw`, adds two products into an i16 and saturates
//! (255 · 127 · 2 does not fit). The narrow kernel tracks the extremes of
//! its pair sums over a tile; a tile whose sums reached ±2¹⁵ may have
//! saturated, and is recomputed exactly in i32. How many tiles were
//! recomputed reaches the run's report.
//!
//! Which micro-kernel runs (in `ops::quant::engine`) and whether the guard is on are per-run
//! settings ([`Int8Settings`]), put in force on the thread that runs each
//! operator ([`scope`]); the engine reads them when a product starts.

use std::cell::Cell;

/// Which micro-kernel computes the int8 engine's tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Int8Kernel {
    /// The fastest exact one this CPU has: on x86-64 VNNI, else the
    /// guarded narrow kernel (AVX2); on aarch64 NEON `sdot` where the CPU
    /// has dotprod, else NEON widening multiplies (both exact); else the
    /// portable one.
    #[default]
    Auto,
    /// AVX-512 VNNI (`vpdpbusd`, exact); [`Auto`](Self::Auto)'s choice on
    /// CPUs without it.
    Vnni,
    /// AVX2 `vpmaddubsw`: i16 pair sums that may saturate, guarded; the
    /// portable kernel on CPUs without AVX2.
    Narrow,
    /// Plain i32 multiply-adds.
    Portable,
}

/// The int8 settings of a run (see [`RunOptions`](crate::session::RunOptions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int8Settings {
    /// The micro-kernel.
    pub kernel: Int8Kernel,
    /// Whether tiles of the narrow kernel that may have saturated are
    /// recomputed exactly (on by default; off only to see what it prevents).
    pub guard: bool,
}

impl Default for Int8Settings {
    fn default() -> Self {
        Int8Settings {
            kernel: Int8Kernel::Auto,
            guard: true,
        }
    }
}

/// The kernel a product runs on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolved {
    Vnni,
    Narrow,
    Portable,
    /// aarch64 with dotprod: `sdot` (exact).
    #[cfg(target_arch = "aarch64")]
    NeonDot,
    /// aarch64 without dotprod: widening multiplies (exact).
    #[cfg(target_arch = "aarch64")]
    NeonWide,
}

impl Int8Kernel {
    /// What runs here: a kernel the CPU lacks falls back as documented.
    pub(crate) fn resolve(self) -> Resolved {
        #[cfg(target_arch = "aarch64")]
        if matches!(self, Int8Kernel::Auto | Int8Kernel::Vnni)
            && crate::ops::gemm::simd::neon_kernels()
        {
            return if super::quant::engine::has_dotprod() {
                Resolved::NeonDot
            } else {
                Resolved::NeonWide
            };
        }
        let (vnni, avx2) = cpu();
        match self {
            Int8Kernel::Auto | Int8Kernel::Vnni if vnni => Resolved::Vnni,
            Int8Kernel::Auto | Int8Kernel::Vnni | Int8Kernel::Narrow if avx2 => Resolved::Narrow,
            _ => Resolved::Portable,
        }
    }
}

/// (VNNI, AVX2) on this CPU.
fn cpu() -> (bool, bool) {
    #[cfg(target_arch = "x86_64")]
    {
        (
            super::quant::engine::has_vnni512(),
            crate::ops::gemm::simd::has_avx2(),
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    (false, false)
}

thread_local! {
    static SETTINGS: Cell<Int8Settings> = Cell::new(Int8Settings::default());
    static RECOMPUTED: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f` with `settings` in force on this thread; returns its result and
/// the tiles the guard recomputed meanwhile.
pub fn scope<R>(settings: Int8Settings, f: impl FnOnce() -> R) -> (R, u64) {
    let before = SETTINGS.with(|s| s.replace(settings));
    let counted = RECOMPUTED.with(|c| c.replace(0));
    let out = f();
    SETTINGS.with(|s| s.set(before));
    let recomputed = RECOMPUTED.with(|c| c.replace(counted));
    (out, recomputed)
}

/// The settings in force on this thread.
pub(crate) fn current() -> Int8Settings {
    SETTINGS.with(Cell::get)
}

/// Counts `n` recomputed tiles (called on the operator's thread).
pub(crate) fn record(n: u64) {
    if n > 0 {
        RECOMPUTED.with(|c| c.set(c.get() + n));
    }
}
