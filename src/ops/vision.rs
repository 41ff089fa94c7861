//! Vision operators: sampling an image at computed coordinates (GridSample,
//! AffineGrid), pooling regions of interest (RoiAlign), and selecting boxes
//! (NonMaxSuppression). Sampling is done in f64 and rounded once to the
//! element type.

use super::Registrar;

mod affine_grid;
mod deform_conv;
mod grid_sample;
mod nms;
mod roi_align;
#[cfg(test)]
mod tests;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add("AffineGrid", 20, affine_grid::build);
    r.add("DeformConv", 19, deform_conv::build);
    r.add("GridSample", 16, grid_sample::build);
    r.add("NonMaxSuppression", 10, nms::build);
    r.add("RoiAlign", 10, roi_align::build);
}
