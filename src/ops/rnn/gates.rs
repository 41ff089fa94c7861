//! Fused f32 gate kernels of the fast path: for one batch row, each reads
//! the input projection (`X_t·Wᵀ` plus the folded biases) and the recurrence
//! product, applies the activations (and `clip`) and updates the state in
//! place, in a single pass over the hidden units. With the default
//! activations the branch-free `sigmoid_f32`/`tanh_f32` of the unary family
//! let the loops vectorise (AVX-512 build where the CPU has it, without
//! fused multiply-adds, so both builds give the same bits); other
//! activations go through [`Act::eval`] in the same loops.

use super::activation::Act;
#[cfg(target_arch = "x86_64")]
use crate::ops::gemm::simd::has_avx512;
use crate::ops::unary::kernel::{sigmoid_f32, tanh_f32};

/// The activations a kernel applies: `f` (gates), `g` (candidate), `h`
/// (LSTM output).
pub(super) trait Acts: Copy {
    fn f(self, x: f32) -> f32;
    fn g(self, x: f32) -> f32;
    fn h(self, x: f32) -> f32;
}

/// The ONNX defaults: sigmoid for gates, tanh otherwise (RNN's single
/// default, tanh, is its `g`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Defaults;

impl Acts for Defaults {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        sigmoid_f32(x)
    }
    #[inline(always)]
    fn g(self, x: f32) -> f32 {
        tanh_f32(x)
    }
    #[inline(always)]
    fn h(self, x: f32) -> f32 {
        tanh_f32(x)
    }
}

/// Any activations from the node's attributes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Custom(pub [Act; 3]);

impl Acts for Custom {
    #[inline(always)]
    fn f(self, x: f32) -> f32 {
        self.0[0].eval(x)
    }
    #[inline(always)]
    fn g(self, x: f32) -> f32 {
        self.0[1].eval(x)
    }
    #[inline(always)]
    fn h(self, x: f32) -> f32 {
        self.0[2].eval(x)
    }
}

/// Clips to ±t when `CLIP` (as the general path does: `max(-t).min(t)`).
#[inline(always)]
fn cl<const CLIP: bool>(x: f32, t: f32) -> f32 {
    if CLIP {
        x.max(-t).min(t)
    } else {
        x
    }
}

/// Runs `$body` compiled for AVX-512 when the CPU has it, else as built.
macro_rules! wide {
    ($name:ident <$($g:ident : $b:path),*; $(const $c:ident),*> ($($a:ident : $t:ty),*) $body:block) => {
        #[allow(clippy::too_many_arguments)]
        #[inline(always)]
        fn $name<$($g: $b,)* $(const $c: bool),*>($($a: $t),*) {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body<$($g: $b,)* $(const $c: bool),*>($($a: $t),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                #[allow(clippy::too_many_arguments)]
                unsafe fn avx512<$($g: $b,)* $(const $c: bool),*>($($a: $t),*) {
                    body::<$($g,)* $($c),*>($($a),*)
                }
                if has_avx512() {
                    // SAFETY: the CPU has AVX-512F, AVX2 and FMA.
                    return unsafe { avx512::<$($g,)* $($c),*>($($a),*) };
                }
            }
            body::<$($g,)* $($c),*>($($a),*)
        }
    };
}

wide! {
    lstm_k<A: Acts; const CLIP, const IF>(
        a: A, t: f32, x: &[f32], rec: &[f32], p: &[f32], h: &mut [f32], c: &mut [f32]
    ) {
        let n = h.len();
        let c = &mut c[..n];
        let (xi, xo, xf, xc) = (&x[..n], &x[n..2 * n], &x[2 * n..3 * n], &x[3 * n..4 * n]);
        let (ri, ro, rf, rc) = (&rec[..n], &rec[n..2 * n], &rec[2 * n..3 * n], &rec[3 * n..4 * n]);
        let (pi, po, pf) = (&p[..n], &p[n..2 * n], &p[2 * n..3 * n]);
        for j in 0..n {
            let cp = c[j];
            let i = a.f(cl::<CLIP>(xi[j] + ri[j] + pi[j] * cp, t));
            let f = if IF {
                1.0 - i
            } else {
                a.f(cl::<CLIP>(xf[j] + rf[j] + pf[j] * cp, t))
            };
            let g = a.g(cl::<CLIP>(xc[j] + rc[j], t));
            let ct = f * cp + i * g;
            let o = a.f(cl::<CLIP>(xo[j] + ro[j] + po[j] * ct, t));
            c[j] = ct;
            h[j] = o * a.h(ct);
        }
    }
}

wide! {
    gru_lbr_k<A: Acts; const CLIP>(a: A, t: f32, x: &[f32], rec: &[f32], rbn: &[f32], h: &mut [f32]) {
        let n = h.len();
        let (xz, xr, xn) = (&x[..n], &x[n..2 * n], &x[2 * n..3 * n]);
        let (rz, rr, rn) = (&rec[..n], &rec[n..2 * n], &rec[2 * n..3 * n]);
        let rbn = &rbn[..n];
        for j in 0..n {
            let z = a.f(cl::<CLIP>(xz[j] + rz[j], t));
            let r = a.f(cl::<CLIP>(xr[j] + rr[j], t));
            let cand = a.g(cl::<CLIP>(xn[j] + r * (rn[j] + rbn[j]), t));
            h[j] = (1.0 - z) * cand + z * h[j];
        }
    }
}

wide! {
    gru_zr_k<A: Acts; const CLIP>(a: A, t: f32, x: &[f32], rec: &[f32], h: &[f32], z: &mut [f32], rh: &mut [f32]) {
        let n = h.len();
        let (xz, xr, rz, rr) = (&x[..n], &x[n..2 * n], &rec[..n], &rec[n..2 * n]);
        let (z, rh) = (&mut z[..n], &mut rh[..n]);
        for j in 0..n {
            z[j] = a.f(cl::<CLIP>(xz[j] + rz[j], t));
            rh[j] = a.f(cl::<CLIP>(xr[j] + rr[j], t)) * h[j];
        }
    }
}

wide! {
    gru_h_k<A: Acts; const CLIP>(a: A, t: f32, xn: &[f32], rec: &[f32], z: &[f32], h: &mut [f32]) {
        let n = h.len();
        let (xn, rec, z) = (&xn[..n], &rec[..n], &z[..n]);
        for j in 0..n {
            let cand = a.g(cl::<CLIP>(xn[j] + rec[j], t));
            h[j] = (1.0 - z[j]) * cand + z[j] * h[j];
        }
    }
}

wide! {
    rnn_k<A: Acts; const CLIP>(a: A, t: f32, x: &[f32], rec: &[f32], h: &mut [f32]) {
        let n = h.len();
        let (x, rec) = (&x[..n], &rec[..n]);
        for j in 0..n {
            h[j] = a.g(cl::<CLIP>(x[j] + rec[j], t));
        }
    }
}

/// The activation settings of one direction.
#[derive(Debug, Clone, Copy)]
pub(super) struct GateCfg {
    /// The direction's activations (`f`, `g`, `h`), `None` for the defaults.
    pub acts: Option<[Act; 3]>,
    /// Clip threshold for the activations' inputs.
    pub clip: Option<f32>,
}

/// Calls `$k::<Acts, CLIP $(, extra const)>(acts, threshold, args...)`
/// for the configuration's activations and clip setting.
macro_rules! dispatch {
    ($cfg:expr, $k:ident, [$($c:expr),*], $($arg:expr),*) => {{
        let cfg: GateCfg = $cfg;
        let t = cfg.clip.unwrap_or(0.0);
        match (cfg.acts, cfg.clip.is_some()) {
            (None, false) => $k::<Defaults, false $(, $c)*>(Defaults, t, $($arg),*),
            (None, true) => $k::<Defaults, true $(, $c)*>(Defaults, t, $($arg),*),
            (Some(a), false) => $k::<Custom, false $(, $c)*>(Custom(a), t, $($arg),*),
            (Some(a), true) => $k::<Custom, true $(, $c)*>(Custom(a), t, $($arg),*),
        }
    }};
}

/// LSTM, one row: `x` and `rec` hold the gates i, o, f, c (`4·n`), `p` the
/// peepholes i, o, f (`3·n`, zeros without them); updates `h` and `c` (`n`).
#[allow(clippy::too_many_arguments)]
pub(super) fn lstm(
    cfg: GateCfg,
    input_forget: bool,
    x: &[f32],
    rec: &[f32],
    p: &[f32],
    h: &mut [f32],
    c: &mut [f32],
) {
    if input_forget {
        dispatch!(cfg, lstm_k, [true], x, rec, p, h, c)
    } else {
        dispatch!(cfg, lstm_k, [false], x, rec, p, h, c)
    }
}

/// GRU with `linear_before_reset`, one row: `x` and `rec` hold z, r, h
/// (`3·n`), `rbn` the hidden gate's recurrence bias; updates `h`.
pub(super) fn gru_lbr(cfg: GateCfg, x: &[f32], rec: &[f32], rbn: &[f32], h: &mut [f32]) {
    dispatch!(cfg, gru_lbr_k, [], x, rec, rbn, h)
}

/// GRU without `linear_before_reset`, first half of one row: the update
/// gate into `z` and `r ⊙ h` into `rh` (`x`, `rec`: gates z, r).
pub(super) fn gru_zr(
    cfg: GateCfg,
    x: &[f32],
    rec: &[f32],
    h: &[f32],
    z: &mut [f32],
    rh: &mut [f32],
) {
    dispatch!(cfg, gru_zr_k, [], x, rec, h, z, rh)
}

/// GRU without `linear_before_reset`, second half: `xn` the hidden gate's
/// input projection, `rec` `(r ⊙ h)·R_hᵀ`; updates `h`.
pub(super) fn gru_h(cfg: GateCfg, xn: &[f32], rec: &[f32], z: &[f32], h: &mut [f32]) {
    dispatch!(cfg, gru_h_k, [], xn, rec, z, h)
}

/// RNN, one row: `h = g(x + rec)` (the direction's one activation is `g`).
pub(super) fn rnn(cfg: GateCfg, x: &[f32], rec: &[f32], h: &mut [f32]) {
    dispatch!(cfg, rnn_k, [], x, rec, h)
}
