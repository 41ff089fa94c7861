//! ONNX's classical machine-learning operators (domain `ai.onnx.ml`):
//! LabelEncoder (opsets 1, 2 and 4), TreeEnsemble (opset 5), Binarizer and
//! ArrayFeatureExtractor (opset 1).

use super::{Registrar, ML_DOMAIN};

mod binarizer;
mod feature_extractor;
mod label_encoder;
mod label_keys;
#[cfg(test)]
mod testutil;
mod tree_ensemble;
mod tree_model;

pub(crate) fn register(r: &mut impl Registrar) {
    r.add_in(
        ML_DOMAIN,
        "ArrayFeatureExtractor",
        1,
        feature_extractor::build,
    );
    r.add_in(ML_DOMAIN, "Binarizer", 1, binarizer::build);
    r.add_in(ML_DOMAIN, "LabelEncoder", 1, label_encoder::build);
    r.add_in(ML_DOMAIN, "TreeEnsemble", 5, tree_ensemble::build);
}
