//! A check of a model file's top-level protobuf framing before it is parsed.
//! The protobuf parser accepts a file cut off inside its last field when the
//! cut happens to fall between two of that field's inner fields, so a
//! truncated download could load as a smaller model; walking the top-level
//! fields and checking that each one fits in the file catches that.

use crate::error::{Error, Result};
use std::io::{Read, Seek, SeekFrom};

/// The largest field number protobuf allows.
const MAX_FIELD: u64 = (1 << 29) - 1;

fn truncated(field: u64) -> Error {
    Error::Malformed(format!(
        "the data ends inside top-level field {field}: it is truncated"
    ))
}

/// Reads a base-128 varint; `None` at a clean end of file.
fn varint(r: &mut impl Read, field: u64) -> Result<Option<u64>> {
    let mut v = 0u64;
    for i in 0..10 {
        let mut b = [0u8];
        if r.read(&mut b)
            .map_err(|e| Error::Malformed(e.to_string()))?
            == 0
        {
            return if i == 0 {
                Ok(None)
            } else {
                Err(truncated(field))
            };
        }
        v |= u64::from(b[0] & 0x7f) << (7 * i);
        if b[0] & 0x80 == 0 {
            return Ok(Some(v));
        }
    }
    Err(Error::Malformed("a varint is longer than 10 bytes".into()))
}

/// Checks that every top-level field of the message in `r` lies within it.
pub(crate) fn check_framing(r: &mut (impl Read + Seek)) -> Result<()> {
    let io = |e: std::io::Error| Error::Malformed(e.to_string());
    let len = r.seek(SeekFrom::End(0)).map_err(io)?;
    r.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut pos = 0u64;
    while let Some(tag) = varint(r, 0)? {
        let field = tag >> 3;
        if field == 0 || field > MAX_FIELD {
            return Err(Error::Malformed(format!(
                "not an ONNX model: at byte {pos} the data holds no valid protobuf field (field number {field} is out of range)"
            )));
        }
        let skip = match tag & 7 {
            0 => {
                varint(r, field)?.ok_or_else(|| truncated(field))?;
                0
            }
            1 => 8,
            2 => varint(r, field)?.ok_or_else(|| truncated(field))?,
            5 => 4,
            w => {
                return Err(Error::Malformed(format!(
                    "not an ONNX model: top-level field {field} at byte {pos} has wire type {w}, which ONNX does not use"
                )))
            }
        };
        pos = r.stream_position().map_err(io)?;
        if skip > len - pos {
            return Err(truncated(field));
        }
        pos = r.seek(SeekFrom::Current(skip as i64)).map_err(io)?;
    }
    debug_assert!(pos <= len);
    r.seek(SeekFrom::Start(0)).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn whole_messages_pass_and_cut_fields_fail() {
        // Field 1 varint 8; field 7 bytes "abc"; field 8 fixed32.
        let msg = [0x08, 0x08, 0x3a, 0x03, b'a', b'b', b'c', 0x45, 1, 2, 3, 4];
        assert!(check_framing(&mut Cursor::new(&msg[..])).is_ok());
        assert!(check_framing(&mut Cursor::new(&msg[..0])).is_ok());
        for cut in [1, 3, 4, 6, 8, 11] {
            let err = check_framing(&mut Cursor::new(&msg[..cut])).unwrap_err();
            assert!(err.to_string().contains("truncated"), "cut {cut}: {err}");
        }
        // Cuts on field boundaries are well framed (the loader then finds
        // what is missing).
        for cut in [2, 7] {
            assert!(check_framing(&mut Cursor::new(&msg[..cut])).is_ok());
        }
        assert!(check_framing(&mut Cursor::new(&[0x0b_u8][..])).is_err());
    }
}
