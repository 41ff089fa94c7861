//! TensorProto ↔ Tensor: every storage form (raw little-endian bytes, the typed
//! repeated fields, external files), with element counts checked against dims.

use super::external::ExternalRef;
use crate::error::{Error, Result};
use crate::tensor::{
    onnx_type_name, DType, Element, Tensor, F4E2M1, F8E4M3FN, F8E4M3FNUZ, F8E5M2, F8E5M2FNUZ,
    F8E8M0, I2, I4, U2, U4,
};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use onnx_protobuf::{tensor_proto::DataLocation, Message, TensorProto};
use std::path::Path;

fn malformed(name: &str, reason: impl std::fmt::Display) -> Error {
    Error::InvalidModel(format!("tensor {name:?}: {reason}"))
}

/// The dims of a tensor proto as a checked shape and element count.
fn checked_shape(name: &str, dims: &[i64]) -> Result<(Vec<usize>, usize)> {
    let mut shape = Vec::with_capacity(dims.len());
    let mut count: usize = 1;
    for &d in dims {
        let d = usize::try_from(d).map_err(|_| malformed(name, format!("negative dim {d}")))?;
        count = count
            .checked_mul(d)
            .ok_or_else(|| malformed(name, format!("dims {dims:?} overflow")))?;
        shape.push(d);
    }
    Ok((shape, count))
}

fn from_le<T: Element, const N: usize>(
    name: &str,
    shape: &[usize],
    count: usize,
    raw: &[u8],
    f: impl Fn([u8; N]) -> T,
) -> Result<Tensor> {
    if raw.len() != count.saturating_mul(N) {
        return Err(malformed(
            name,
            format!(
                "raw_data has {} bytes, but {count} elements of {} need {}",
                raw.len(),
                T::DTYPE,
                count.saturating_mul(N)
            ),
        ));
    }
    let data: Vec<T> = raw
        .chunks_exact(N)
        .map(|c| {
            let mut b = [0u8; N];
            b.copy_from_slice(c);
            f(b)
        })
        .collect();
    Ok(T::into_tensor(
        ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| malformed(name, e))?,
    ))
}

/// Bytes that `count` elements of `dtype` take in storage (packed for the
/// sub-byte types), or `None` on overflow.
fn stored_len(dtype: DType, count: usize) -> Option<usize> {
    match dtype.per_byte() {
        1 => count.checked_mul(dtype.size_of()),
        n => Some(count.div_ceil(n)),
    }
}

/// Unpacks sub-byte elements (lowest bits first) from `bytes`, which must be
/// exactly the packed length of `count` elements.
fn unpack<T: Element>(
    name: &str,
    shape: &[usize],
    count: usize,
    bytes: &[u8],
    f: impl Fn(u8) -> T,
) -> Result<Tensor> {
    let per = T::DTYPE.per_byte();
    let need = count.div_ceil(per);
    if bytes.len() != need {
        return Err(malformed(
            name,
            format!(
                "holds {} packed bytes, but {count} elements of {} need {need}",
                bytes.len(),
                T::DTYPE
            ),
        ));
    }
    let bits = 8 / per;
    let mask = (1u8 << bits) - 1;
    let data: Vec<T> = (0..count)
        .map(|i| f((bytes[i / per] >> ((i % per) * bits)) & mask))
        .collect();
    Ok(T::into_tensor(
        ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| malformed(name, e))?,
    ))
}

/// Packs sub-byte elements given as their bits, lowest bits first (the last
/// byte padded with zeros).
fn pack(bits: impl Iterator<Item = u8>, per: usize) -> Vec<u8> {
    let width = 8 / per;
    let mut out = Vec::new();
    for (i, b) in bits.enumerate() {
        if i % per == 0 {
            out.push(0);
        }
        if let Some(last) = out.last_mut() {
            *last |= b << ((i % per) * width);
        }
    }
    out
}

fn from_raw(name: &str, dtype: DType, shape: &[usize], count: usize, raw: &[u8]) -> Result<Tensor> {
    match dtype {
        DType::F8E4M3FN => from_le(name, shape, count, raw, |b: [u8; 1]| {
            F8E4M3FN::from_bits(b[0])
        }),
        DType::F8E4M3FNUZ => from_le(name, shape, count, raw, |b: [u8; 1]| {
            F8E4M3FNUZ::from_bits(b[0])
        }),
        DType::F8E5M2 => from_le(name, shape, count, raw, |b: [u8; 1]| {
            F8E5M2::from_bits(b[0])
        }),
        DType::F8E5M2FNUZ => from_le(name, shape, count, raw, |b: [u8; 1]| {
            F8E5M2FNUZ::from_bits(b[0])
        }),
        DType::F8E8M0 => from_le(name, shape, count, raw, |b: [u8; 1]| {
            F8E8M0::from_bits(b[0])
        }),
        DType::F4E2M1 => unpack(name, shape, count, raw, F4E2M1::from_bits),
        DType::U4 => unpack(name, shape, count, raw, U4::from_bits),
        DType::I4 => unpack(name, shape, count, raw, I4::from_bits),
        DType::U2 => unpack(name, shape, count, raw, U2::from_bits),
        DType::I2 => unpack(name, shape, count, raw, I2::from_bits),
        DType::F32 => from_le(name, shape, count, raw, f32::from_le_bytes),
        DType::F64 => from_le(name, shape, count, raw, f64::from_le_bytes),
        DType::F16 => from_le(name, shape, count, raw, |b| {
            f16::from_bits(u16::from_le_bytes(b))
        }),
        DType::BF16 => from_le(name, shape, count, raw, |b| {
            bf16::from_bits(u16::from_le_bytes(b))
        }),
        DType::I8 => from_le(name, shape, count, raw, i8::from_le_bytes),
        DType::I16 => from_le(name, shape, count, raw, i16::from_le_bytes),
        DType::I32 => from_le(name, shape, count, raw, i32::from_le_bytes),
        DType::I64 => from_le(name, shape, count, raw, i64::from_le_bytes),
        DType::U8 => from_le(name, shape, count, raw, u8::from_le_bytes),
        DType::U16 => from_le(name, shape, count, raw, u16::from_le_bytes),
        DType::U32 => from_le(name, shape, count, raw, u32::from_le_bytes),
        DType::U64 => from_le(name, shape, count, raw, u64::from_le_bytes),
        DType::Bool => from_le(name, shape, count, raw, |b: [u8; 1]| b[0] != 0),
        DType::String => Err(malformed(name, "string tensors cannot use raw_data")),
    }
}

fn from_typed<S: Copy, T: Element>(
    name: &str,
    shape: &[usize],
    count: usize,
    field: &[S],
    f: impl Fn(S) -> T,
) -> Result<Tensor> {
    if field.len() != count {
        return Err(malformed(
            name,
            format!("holds {} values, but its dims need {count}", field.len()),
        ));
    }
    let data: Vec<T> = field.iter().map(|&v| f(v)).collect();
    Ok(T::into_tensor(
        ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| malformed(name, e))?,
    ))
}

fn from_fields(
    name: &str,
    dtype: DType,
    shape: &[usize],
    count: usize,
    p: &TensorProto,
) -> Result<Tensor> {
    let i32s = &p.int32_data;
    // Sub-byte types keep one packed byte per int32 entry.
    let packed = || i32s.iter().map(|&v| v as u8).collect::<Vec<u8>>();
    match dtype {
        DType::F8E4M3FN => from_typed(name, shape, count, i32s, |v| F8E4M3FN::from_bits(v as u8)),
        DType::F8E4M3FNUZ => {
            from_typed(name, shape, count, i32s, |v| F8E4M3FNUZ::from_bits(v as u8))
        }
        DType::F8E5M2 => from_typed(name, shape, count, i32s, |v| F8E5M2::from_bits(v as u8)),
        DType::F8E5M2FNUZ => {
            from_typed(name, shape, count, i32s, |v| F8E5M2FNUZ::from_bits(v as u8))
        }
        DType::F8E8M0 => from_typed(name, shape, count, i32s, |v| F8E8M0::from_bits(v as u8)),
        DType::F4E2M1 => unpack(name, shape, count, &packed(), F4E2M1::from_bits),
        DType::U4 => unpack(name, shape, count, &packed(), U4::from_bits),
        DType::I4 => unpack(name, shape, count, &packed(), I4::from_bits),
        DType::U2 => unpack(name, shape, count, &packed(), U2::from_bits),
        DType::I2 => unpack(name, shape, count, &packed(), I2::from_bits),
        DType::F32 => from_typed(name, shape, count, &p.float_data, |v| v),
        DType::F64 => from_typed(name, shape, count, &p.double_data, |v| v),
        DType::F16 => from_typed(name, shape, count, i32s, |v| f16::from_bits(v as u16)),
        DType::BF16 => from_typed(name, shape, count, i32s, |v| bf16::from_bits(v as u16)),
        DType::I8 => from_typed(name, shape, count, i32s, |v| v as i8),
        DType::I16 => from_typed(name, shape, count, i32s, |v| v as i16),
        DType::I32 => from_typed(name, shape, count, i32s, |v| v),
        DType::I64 => from_typed(name, shape, count, &p.int64_data, |v| v),
        DType::U8 => from_typed(name, shape, count, i32s, |v| v as u8),
        DType::U16 => from_typed(name, shape, count, i32s, |v| v as u16),
        DType::U32 => from_typed(name, shape, count, &p.uint64_data, |v| v as u32),
        DType::U64 => from_typed(name, shape, count, &p.uint64_data, |v| v),
        DType::Bool => from_typed(name, shape, count, i32s, |v| v != 0),
        DType::String => {
            if p.string_data.len() != count {
                return Err(malformed(
                    name,
                    format!(
                        "holds {} strings, but its dims need {count}",
                        p.string_data.len()
                    ),
                ));
            }
            let data: Vec<String> = p
                .string_data
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            Ok(Tensor::String(
                ArrayD::from_shape_vec(IxDyn(shape), data).map_err(|e| malformed(name, e))?,
            ))
        }
    }
}

/// Converts a TensorProto to a tensor, taking its buffers so that memory is
/// released as soon as possible. `base` is the model's folder, for external data.
pub fn tensor_from_proto(p: &mut TensorProto, base: Option<&Path>) -> Result<Tensor> {
    let name = p.name.clone();
    if p.segment.is_some() {
        return Err(malformed(&name, "segmented tensors are not supported"));
    }
    let dtype = DType::from_onnx_code(p.data_type).map_err(|_| {
        Error::UnsupportedType(format!("{} (tensor {name:?})", onnx_type_name(p.data_type)))
    })?;
    let (shape, count) = checked_shape(&name, &p.dims)?;
    let external = p.data_location.enum_value() == Ok(DataLocation::EXTERNAL);
    if external {
        if dtype == DType::String {
            return Err(malformed(
                &name,
                "string tensors cannot be stored externally",
            ));
        }
        let entries: Vec<(String, String)> = p
            .external_data
            .iter()
            .map(|e| (e.key.clone(), e.value.clone()))
            .collect();
        let r = ExternalRef::parse(&name, &entries)?;
        let needed = stored_len(dtype, count).ok_or_else(|| malformed(&name, "too large"))?;
        let bytes = r.read(&name, base, needed)?;
        return from_raw(&name, dtype, &shape, count, &bytes);
    }
    if !p.raw_data.is_empty() || (count == 0 && dtype != DType::String) {
        let raw = std::mem::take(&mut p.raw_data);
        return from_raw(&name, dtype, &shape, count, &raw);
    }
    from_fields(&name, dtype, &shape, count, p)
}

/// Converts a tensor to a TensorProto with raw little-endian data (strings use `string_data`).
pub fn tensor_to_proto(t: &Tensor, name: &str) -> TensorProto {
    let mut p = TensorProto::new();
    p.name = name.to_string();
    p.data_type = t.dtype().onnx_code();
    p.dims = t.shape().iter().map(|&d| d as i64).collect();
    fn raw<T: Copy, const N: usize>(a: &ArrayD<T>, f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        let mut v = Vec::with_capacity(a.len() * N);
        for &x in a.iter() {
            v.extend_from_slice(&f(x));
        }
        v
    }
    p.raw_data = match t {
        Tensor::F32(a) => raw(a, f32::to_le_bytes),
        Tensor::F64(a) => raw(a, f64::to_le_bytes),
        Tensor::F16(a) => raw(a, |x| x.to_bits().to_le_bytes()),
        Tensor::BF16(a) => raw(a, |x| x.to_bits().to_le_bytes()),
        Tensor::I8(a) => raw(a, i8::to_le_bytes),
        Tensor::I16(a) => raw(a, i16::to_le_bytes),
        Tensor::I32(a) => raw(a, i32::to_le_bytes),
        Tensor::I64(a) => raw(a, i64::to_le_bytes),
        Tensor::U8(a) => raw(a, u8::to_le_bytes),
        Tensor::U16(a) => raw(a, u16::to_le_bytes),
        Tensor::U32(a) => raw(a, u32::to_le_bytes),
        Tensor::U64(a) => raw(a, u64::to_le_bytes),
        Tensor::Bool(a) => raw(a, |x| [x as u8]),
        Tensor::String(a) => {
            p.string_data = a.iter().map(|s| s.as_bytes().to_vec()).collect();
            Vec::new()
        }
        Tensor::F8E4M3FN(a) => raw(a, |x| [x.to_bits()]),
        Tensor::F8E4M3FNUZ(a) => raw(a, |x| [x.to_bits()]),
        Tensor::F8E5M2(a) => raw(a, |x| [x.to_bits()]),
        Tensor::F8E5M2FNUZ(a) => raw(a, |x| [x.to_bits()]),
        Tensor::F8E8M0(a) => raw(a, |x| [x.to_bits()]),
        Tensor::F4E2M1(a) => pack(a.iter().map(|x| x.to_bits()), 2),
        Tensor::U4(a) => pack(a.iter().map(|x| x.to_bits()), 2),
        Tensor::I4(a) => pack(a.iter().map(|x| x.to_bits()), 2),
        Tensor::U2(a) => pack(a.iter().map(|x| x.to_bits()), 4),
        Tensor::I2(a) => pack(a.iter().map(|x| x.to_bits()), 4),
    };
    p
}

/// Reads a serialized TensorProto file (the layout of ONNX test data sets).
pub fn read_tensor_file(path: &Path) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut p = TensorProto::parse_from_bytes(&bytes)
        .map_err(|e| Error::Malformed(format!("{}: {e}", path.display())))?;
    tensor_from_proto(&mut p, path.parent())
}

/// Writes a tensor as a serialized TensorProto file.
pub fn write_tensor_file(path: &Path, t: &Tensor, name: &str) -> Result<()> {
    let bytes = tensor_to_proto(t, name)
        .write_to_bytes()
        .map_err(|e| Error::Malformed(e.to_string()))?;
    std::fs::write(path, bytes).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_type() {
        let cases = vec![
            Tensor::from_vec(&[2, 2], vec![1.5f32, -2.0, 0.0, 3.25]).unwrap(),
            Tensor::from_vec(&[3], vec![1.5f64, -2.0, 7.0]).unwrap(),
            Tensor::from_vec(&[2], vec![f16::from_f32(0.5), f16::from_f32(-4.0)]).unwrap(),
            Tensor::from_vec(&[2], vec![i64::MIN, 7]).unwrap(),
            Tensor::from_vec(&[2], vec![-3i8, 5]).unwrap(),
            Tensor::from_vec(&[3], vec![true, false, true]).unwrap(),
            Tensor::from_vec(&[2], vec!["a".to_string(), "bc".to_string()]).unwrap(),
            Tensor::from_vec(&[0, 3], Vec::<f32>::new()).unwrap(),
            Tensor::from_vec(&[3], [0u8, 0x7f, 0xff].map(F8E8M0::from_bits).to_vec()).unwrap(),
        ];
        for t in cases {
            let mut p = tensor_to_proto(&t, "x");
            assert_eq!(tensor_from_proto(&mut p, None).unwrap(), t);
        }
    }

    #[test]
    fn reads_typed_fields() {
        let mut p = TensorProto::new();
        p.data_type = 10; // float16 in int32_data
        p.dims = vec![2];
        p.int32_data = vec![
            f16::from_f32(1.0).to_bits() as i32,
            f16::from_f32(-2.0).to_bits() as i32,
        ];
        let t = tensor_from_proto(&mut p, None).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, -2.0]);
        // FLOAT8E8M0, one byte per int32 entry; raw, one byte per element.
        let mut p = TensorProto::new();
        p.data_type = 24;
        p.dims = vec![3];
        p.int32_data = vec![0x7f, 0x80, 0xfe];
        let t = tensor_from_proto(&mut p, None).unwrap();
        assert_eq!(t.dtype(), DType::F8E8M0);
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, 2.0, 2f64.powi(127)]);
        let mut raw = tensor_to_proto(&t, "t");
        assert_eq!(raw.raw_data, [0x7f, 0x80, 0xfe]);
        assert_eq!(tensor_from_proto(&mut raw, None).unwrap(), t);
    }

    #[test]
    fn rejects_count_mismatch_and_bad_dims() {
        let mut p = TensorProto::new();
        p.data_type = 1;
        p.dims = vec![3];
        p.float_data = vec![1.0, 2.0];
        assert!(matches!(
            tensor_from_proto(&mut p, None),
            Err(Error::InvalidModel(_))
        ));
        p.dims = vec![-1];
        assert!(tensor_from_proto(&mut p, None).is_err());
        p.dims = vec![i64::MAX, i64::MAX];
        assert!(tensor_from_proto(&mut p, None).is_err());
        p.dims = vec![1];
        p.data_type = 15; // complex128
        assert!(matches!(
            tensor_from_proto(&mut p, None),
            Err(Error::UnsupportedType(_))
        ));
    }

    #[test]
    fn narrow_types_round_trip_packed() {
        let i4: Vec<I4> = (-8..8).chain([3]).map(I4::wrapping).collect();
        let u2: Vec<U2> = [0, 1, 2, 3, 3].into_iter().map(U2::wrapping).collect();
        let i2: Vec<I2> = [-2, -1, 0, 1, 1, -2]
            .into_iter()
            .map(I2::wrapping)
            .collect();
        let f4: Vec<F4E2M1> = (0..15).map(F4E2M1::from_bits).collect();
        let f8: Vec<F8E5M2> = (0..=255).map(F8E5M2::from_bits).collect();
        let cases = vec![
            Tensor::from_vec(&[17], i4).unwrap(),
            Tensor::from_vec(&[5, 1], u2).unwrap(),
            Tensor::from_vec(&[2, 3], i2).unwrap(),
            Tensor::from_vec(&[15], f4).unwrap(),
            Tensor::from_vec(&[16, 16], f8).unwrap(),
            Tensor::from_vec(&[0], Vec::<U4>::new()).unwrap(),
        ];
        let lens = [9, 2, 2, 8, 256, 0];
        for (t, len) in cases.into_iter().zip(lens) {
            let mut p = tensor_to_proto(&t, "x");
            assert_eq!(p.raw_data.len(), len, "{t}");
            assert_eq!(tensor_from_proto(&mut p, None).unwrap(), t);
        }
        // Low nibble first; the odd element's pad nibble is zero.
        let t = Tensor::from_vec(
            &[3],
            vec![I4::wrapping(-1), I4::wrapping(2), I4::wrapping(-8)],
        );
        assert_eq!(tensor_to_proto(&t.unwrap(), "x").raw_data, vec![0x2f, 0x08]);
        let t = Tensor::from_vec(&[4], [1, -2, 0, -1].map(I2::wrapping).to_vec());
        assert_eq!(
            tensor_to_proto(&t.unwrap(), "x").raw_data,
            vec![0b11_00_10_01]
        );
    }

    #[test]
    fn narrow_types_from_int32_data() {
        let mut p = TensorProto::new();
        p.data_type = 22; // int4: one packed byte per int32
        p.dims = vec![3];
        p.int32_data = vec![0x71, 0x08];
        let t = tensor_from_proto(&mut p, None).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), vec![1, 7, -8]);
        let mut p = TensorProto::new();
        p.data_type = 17; // float8e4m3fn: one value per int32
        p.dims = vec![3];
        p.int32_data = vec![0x38, 0x7e, 0xff];
        let v = tensor_from_proto(&mut p, None)
            .unwrap()
            .to_f64_vec()
            .unwrap();
        assert_eq!(v[..2], [1.0, 448.0]);
        assert!(v[2].is_nan());
    }

    #[test]
    fn short_packed_data_is_an_error() {
        for (code, dims, raw) in [
            (22, vec![5], vec![0u8; 2]),
            (21, vec![4], vec![0u8; 3]),
            (26, vec![9], vec![0u8; 2]),
            (23, vec![1 << 40], vec![0u8; 1]),
            (17, vec![3], vec![0u8; 2]),
        ] {
            let mut p = TensorProto::new();
            p.data_type = code;
            p.dims = dims;
            p.raw_data = raw;
            assert!(
                matches!(tensor_from_proto(&mut p, None), Err(Error::InvalidModel(_))),
                "type {code}"
            );
        }
        let mut p = TensorProto::new();
        p.data_type = 25;
        p.dims = vec![5];
        p.int32_data = vec![0xff];
        assert!(tensor_from_proto(&mut p, None).is_err());
    }
}
