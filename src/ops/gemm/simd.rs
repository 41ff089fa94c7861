//! Run-time CPU-feature dispatch for the hand-written loops of the NN kernels:
//! one generic body compiled twice, for the baseline target and with AVX2
//! and FMA enabled, picked when called. Bodies use plain multiplies and
//! adds, which the compiler never fuses, or ask for a fused multiply-add
//! by name (`mul_add`), which is exact everywhere (one instruction in the
//! AVX2 and AVX-512 builds, the C library's `fmaf` in the baseline one),
//! so every build gives the same bits. Kernels with intrinsics of their
//! own check [`has_avx512`] themselves.

/// True when the CPU supports AVX2 (std detects the features once and
/// caches them, so this is a load and a bit test).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// True when the CPU supports AVX-512F with FMA: kernels that may fuse
/// multiply-adds use it. Their bits differ from the plain builds', but one
/// machine always takes the same path, so runs stay bit-identical whatever
/// the thread count.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("fma")
}

/// True when the CPU supports AVX2 and FMA (every AVX2 x86 core but a few
/// early ones): the 256-bit kernels that fuse multiply-adds use it.
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx2_fma() -> bool {
    has_avx2() && std::arch::is_x86_feature_detected!("fma")
}

/// True when the CPU supports the AVX-512 subsets the wide builds enable
/// (F, BW, DQ, VL).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512_wide() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512dq")
        && std::arch::is_x86_feature_detected!("avx512vl")
}

/// The environment variable that, set to `1`, keeps the aarch64 NEON
/// kernels off so that operators run their portable code: the baseline of
/// the instruction counts in `scripts/aarch64.sh count`.
#[cfg(target_arch = "aarch64")]
pub(crate) const PORTABLE_KERNELS_VAR: &str = "RAMIFY_PORTABLE_KERNELS";

/// Whether the hand-written NEON kernels may run (read once per process).
#[cfg(target_arch = "aarch64")]
pub(crate) fn neon_kernels() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os(PORTABLE_KERNELS_VAR).is_none_or(|v| v != "1"))
}

/// Defines a function whose body is compiled both for the baseline target and
/// with AVX2 and FMA enabled; that build runs when the CPU has both. Written as
/// `multiversion! { wide fn ... }`, the body is also compiled with AVX-512
/// (16 f32 lanes), for compute-bound loops such as the transcendental
/// kernels (GELU, Softmax, normalisation rows): the same plain operations
/// in wider vectors, so every build gives the same bits.
macro_rules! multiversion {
    (
        wide
        $(#[$meta:meta])*
        $vis:vis fn $name:ident $(<$($gen:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?
        $body:block
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512 $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2 $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if $crate::ops::gemm::simd::has_avx512_wide() {
                    // SAFETY: the CPU supports these AVX-512 subsets (checked just above).
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::ops::gemm::simd::has_avx2_fma() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
    (
        $(#[$meta:meta])*
        $vis:vis fn $name:ident $(<$($gen:ident : $bound:path),*>)? ($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)?
        $body:block
    ) => {
        $(#[$meta])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx2 $(<$($gen: $bound),*>)? ($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if $crate::ops::gemm::simd::has_avx2_fma() {
                    // SAFETY: the CPU supports AVX2 and FMA (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}
pub(crate) use multiversion;
