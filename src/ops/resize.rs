//! TODO family header.

use super::Registry;

pub(crate) fn register(_r: &mut Registry) {}
