//! ConvTranspose (to do).

use crate::error::Result;
use crate::ops::{BuildContext, Operator};

pub(super) fn build(_ctx: &BuildContext) -> Result<Box<dyn Operator>> {
    Err(crate::error::Error::op("ConvTranspose", "not yet"))
}
