//! External tensor data (the ONNX external-data convention): reads a byte
//! range of a file beside the model, refusing paths that leave the model's folder.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// Where a tensor's bytes live, from its `external_data` entries.
#[derive(Debug, Default)]
pub(crate) struct ExternalRef {
    pub location: String,
    pub offset: u64,
    pub length: Option<u64>,
}

impl ExternalRef {
    /// Parses the key/value entries of a tensor's `external_data`.
    pub fn parse(tensor: &str, entries: &[(String, String)]) -> Result<ExternalRef> {
        let bad = |reason: String| Error::ExternalData {
            tensor: tensor.to_string(),
            reason,
        };
        let mut r = ExternalRef::default();
        for (k, v) in entries {
            match k.as_str() {
                "location" => r.location = v.clone(),
                "offset" => {
                    r.offset = v
                        .parse()
                        .map_err(|_| bad(format!("offset {v:?} is not a number")))?
                }
                "length" => {
                    r.length = Some(
                        v.parse()
                            .map_err(|_| bad(format!("length {v:?} is not a number")))?,
                    )
                }
                _ => {}
            }
        }
        if r.location.is_empty() {
            return Err(bad("no location given".into()));
        }
        Ok(r)
    }

    /// Reads the referenced bytes, with `base` the model's folder.
    pub fn read(&self, tensor: &str, base: Option<&Path>, expected: usize) -> Result<Vec<u8>> {
        let bad = |reason: String| Error::ExternalData {
            tensor: tensor.to_string(),
            reason,
        };
        let base = base.ok_or_else(|| {
            bad("the model was loaded from bytes, so there is no folder to read it from".into())
        })?;
        let path = resolve_inside(base, &self.location).map_err(bad)?;
        let mut file = File::open(&path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        let file_len = file
            .metadata()
            .map_err(|e| bad(format!("{}: {e}", path.display())))?
            .len();
        let length = self.length.unwrap_or(expected as u64);
        if length != expected as u64 {
            return Err(bad(format!(
                "length {length} does not match the {expected} bytes the tensor needs"
            )));
        }
        let end = self
            .offset
            .checked_add(length)
            .ok_or_else(|| bad("offset + length overflows".into()))?;
        if end > file_len {
            return Err(bad(format!(
                "bytes {}..{end} lie beyond the end of {} ({file_len} bytes)",
                self.offset,
                path.display()
            )));
        }
        file.seek(SeekFrom::Start(self.offset))
            .map_err(|e| bad(e.to_string()))?;
        let mut buf = vec![0u8; expected];
        file.read_exact(&mut buf).map_err(|e| bad(e.to_string()))?;
        Ok(buf)
    }
}

/// Joins `location` to `base`, refusing absolute paths, `..` components and
/// symbolic links that lead outside `base`.
fn resolve_inside(base: &Path, location: &str) -> std::result::Result<PathBuf, String> {
    let rel = Path::new(location);
    if rel.is_absolute()
        || rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(format!(
            "path {location:?} leaves the model's folder; only relative paths inside it are allowed"
        ));
    }
    let joined = base.join(rel);
    let real = joined
        .canonicalize()
        .map_err(|e| format!("{}: {e}", joined.display()))?;
    let real_base = base
        .canonicalize()
        .map_err(|e| format!("{}: {e}", base.display()))?;
    if !real.starts_with(&real_base) {
        return Err(format!(
            "path {location:?} resolves to {}, outside the model's folder",
            real.display()
        ));
    }
    Ok(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_paths_outside() {
        let dir = std::env::temp_dir();
        assert!(resolve_inside(&dir, "../etc/passwd").is_err());
        assert!(resolve_inside(&dir, "/etc/passwd").is_err());
        assert!(resolve_inside(&dir, "a/../../b").is_err());
    }
}
