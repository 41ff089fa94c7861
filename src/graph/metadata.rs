//! What a model file says about itself: who produced it, its version and
//! description, and the custom key/value pairs an exporter wrote
//! (`ModelProto.metadata_props`, e.g. labels or preprocessing settings).

/// A model's self-description, as read from its ModelProto and GraphProto.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelMetadata {
    /// The tool that wrote the model (`producer_name`, e.g. "pytorch").
    pub producer_name: String,
    /// That tool's version (`producer_version`).
    pub producer_version: String,
    /// The model's namespace (`domain`, e.g. "com.example.vision").
    pub domain: String,
    /// The model's own version number (`model_version`; 0 when unset).
    pub model_version: i64,
    /// The ONNX IR version the file uses.
    pub ir_version: i64,
    /// The model's description (`ModelProto.doc_string`).
    pub description: String,
    /// The main graph's name.
    pub graph_name: String,
    /// The main graph's description (`GraphProto.doc_string`).
    pub graph_description: String,
    /// Custom key/value pairs (`metadata_props`), in file order.
    pub custom: Vec<(String, String)>,
}

impl ModelMetadata {
    /// The value of custom key `key`, if the model has it (the last one
    /// wins when a key repeats).
    ///
    /// ```
    /// use ramify::graph::ModelMetadata;
    /// let m = ModelMetadata {
    ///     custom: vec![("labels".into(), "cat,dog".into())],
    ///     ..ModelMetadata::default()
    /// };
    /// assert_eq!(m.custom("labels"), Some("cat,dog"));
    /// assert_eq!(m.custom("mean"), None);
    /// ```
    pub fn custom(&self, key: &str) -> Option<&str> {
        self.custom
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}
