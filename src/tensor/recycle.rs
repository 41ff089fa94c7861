//! Recycled buffers: the executor hands back the storage of every float,
//! 32-bit integer and byte intermediate tensor it frees, and kernels that
//! overwrite every element of their output take their output buffer from
//! here (int8 models' activations are bytes, their accumulators i32). A model runs the
//! same shapes every time, so after the first run each output buffer is a
//! buffer of the same size freed earlier in the run (or the previous run):
//! no zero-fill and no fresh pages to fault in on the hot path. A held
//! buffer serves any request from its size down to half of it (see
//! [`fits`]), the tightest first; the pool holds at most [`MAX_BUFFERS`]
//! buffers and [`MAX_BYTES`] bytes, so it cannot grow without bound. The bounds hold
//! one buffer of every activation size of a large CNN (DenseNet-121's
//! growing concats have over a hundred sizes, more than 64 MB of them):
//! a run whose buffers do not fit allocates afresh, and where the binary
//! has glibc map large blocks (the `ramify` command line does) that means
//! fresh pages on every run.

use std::sync::Mutex;

/// Most buffers kept per pool (f32 and the other 4-byte types share one,
/// f64 has one, and the bytes one).
pub const MAX_BUFFERS: usize = 512;
/// Most bytes kept per pool.
pub const MAX_BYTES: usize = 256 << 20;

/// A pool of buffers of one element type.
struct Pool<T> {
    buffers: Mutex<Vec<Vec<T>>>,
}

impl<T: Copy> Pool<T> {
    const fn new() -> Pool<T> {
        Pool {
            buffers: Mutex::new(Vec::new()),
        }
    }

    /// A buffer of `len` elements (contents unspecified, initialised): the
    /// held buffer that fits `len` most tightly ([`fits`]), cut to `len`,
    /// else a new one filled with `zero`. Builds with debug assertions (the
    /// tests) fill it with `poison` instead, so a kernel that reads an
    /// element before writing it, or leaves one unwritten, gives wrong
    /// values there and fails its test.
    fn take(&self, len: usize, zero: T, poison: T) -> Vec<T> {
        let fill = if cfg!(debug_assertions) { poison } else { zero };
        if len > 0 {
            let mut held = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
            // The smallest room that fits; of equal rooms the last given back.
            let best = held
                .iter()
                .enumerate()
                .filter(|(_, b)| fits(b.capacity(), len))
                .min_by_key(|&(i, b)| (b.capacity(), usize::MAX - i))
                .map(|(i, _)| i);
            if let Some(i) = best {
                let mut buf = held.swap_remove(i);
                drop(held);
                if buf.len() >= len {
                    buf.truncate(len);
                } else {
                    buf.resize(len, fill);
                }
                if cfg!(debug_assertions) {
                    buf.fill(fill);
                }
                return buf;
            }
        }
        vec![fill; len]
    }

    /// Keeps `buf` for a later [`Pool::take`] when there is room (counted
    /// in allocated elements, so a cut buffer counts whole).
    fn give(&self, buf: Vec<T>) {
        let size = std::mem::size_of::<T>().max(1);
        if buf.is_empty() || buf.capacity() > MAX_BYTES / size {
            return;
        }
        let mut held = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let bytes: usize = held.iter().map(|b| b.capacity() * size).sum();
        if held.len() >= MAX_BUFFERS || bytes + buf.capacity() * size > MAX_BYTES {
            // Full: the oldest buffer makes room when it is no larger.
            match held.first() {
                Some(old) if old.capacity() <= buf.capacity() => {
                    held.remove(0);
                }
                _ => return,
            }
            let bytes: usize = held.iter().map(|b| b.capacity() * size).sum();
            if bytes + buf.capacity() * size > MAX_BYTES {
                return;
            }
        }
        held.push(buf);
    }

    fn clear(&self) {
        self.buffers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Whether a held buffer with room for `held` elements serves a request
/// for `len`: it has room for them, and for at most twice as many. A run's
/// values shrink and grow through a network (ResNet-50: 3.2, 1.6 and
/// 0.8 MB planes), and a buffer freed by a larger value may serve a
/// smaller one instead of the pool keeping one buffer per length: after
/// ResNet-50's first run the pool held 8.2 MB instead of 14.1, and the
/// process's peak resident size fell by 2.4 MB. A buffer is matched by its
/// room, not by the length it was cut to, so it serves its own size again
/// on the next run (cut by length, Inception v1's buffers shrank run after
/// run and its runs mapped fresh pages).
fn fits(held: usize, len: usize) -> bool {
    held >= len && held <= len.saturating_mul(2)
}

static F32: Pool<f32> = Pool::new();
static F64: Pool<f64> = Pool::new();
static BYTES: Pool<u8> = Pool::new();

/// Element types with a recycling pool.
pub trait Recycled: Copy + Sized {
    /// A buffer of `len` elements whose contents are unspecified (but
    /// initialised): the caller must write every element before reading it.
    fn take_buffer(len: usize) -> Vec<Self>;
}

impl Recycled for f32 {
    fn take_buffer(len: usize) -> Vec<f32> {
        F32.take(len, 0.0, f32::NAN)
    }
}

impl Recycled for f64 {
    fn take_buffer(len: usize) -> Vec<f64> {
        F64.take(len, 0.0, f64::NAN)
    }
}

/// A buffer of `len` elements of any type for a kernel that writes every
/// element: recycled when `T` has a pool, else default-filled. The 4-byte
/// types (f32, i32, u32) share the f32 pool, and the 1-byte integers (u8,
/// i8) the bytes pool, as bits of their width (`tensor::bits`): the
/// operators that move elements as bits fill f32 outputs with u32s, and an
/// int8 layer's i8 output may reuse a u8 one's storage.
pub fn take_or_default<T: Clone + Default + 'static>(len: usize) -> Vec<T> {
    use super::bits::AsBits;
    use std::any::{Any, TypeId};
    let id = TypeId::of::<T>();
    let pooled: Option<Box<dyn Any>> = if id == TypeId::of::<f32>() {
        Some(Box::new(F32.take(len, 0.0, f32::NAN)))
    } else if id == TypeId::of::<f64>() {
        Some(Box::new(F64.take(len, 0.0, f64::NAN)))
    } else if id == TypeId::of::<u32>() {
        Some(Box::new(<f32 as AsBits>::into_bits(F32.take(
            len,
            0.0,
            f32::NAN,
        ))))
    } else if id == TypeId::of::<i32>() {
        let bits = <f32 as AsBits>::into_bits(F32.take(len, 0.0, f32::NAN));
        Some(Box::new(<i32 as AsBits>::from_bits(bits)))
    } else if id == TypeId::of::<u64>() {
        Some(Box::new(<f64 as AsBits>::into_bits(F64.take(
            len,
            0.0,
            f64::NAN,
        ))))
    } else if id == TypeId::of::<u8>() {
        Some(Box::new(BYTES.take(len, 0, 0xA5)))
    } else if id == TypeId::of::<i8>() {
        Some(Box::new(<i8 as AsBits>::from_bits(
            BYTES.take(len, 0, 0xA5),
        )))
    } else {
        None
    };
    match pooled.map(|b| b.downcast::<Vec<T>>()) {
        Some(Ok(v)) => *v,
        _ => vec![T::default(); len],
    }
}

/// Hands a buffer taken with [`take_or_default`] (or any buffer of a pooled
/// element type) back to the pools; other element types are dropped.
pub fn give_back<T: 'static>(buf: Vec<T>) {
    use super::bits::AsBits;
    use std::any::Any;
    let any: Box<dyn Any> = Box::new(buf);
    let any = match any.downcast::<Vec<f32>>() {
        Ok(v) => return F32.give(*v),
        Err(a) => a,
    };
    let any = match any.downcast::<Vec<f64>>() {
        Ok(v) => return F64.give(*v),
        Err(a) => a,
    };
    let any = match any.downcast::<Vec<u32>>() {
        Ok(v) => return F32.give(<f32 as AsBits>::from_bits(*v)),
        Err(a) => a,
    };
    let any = match any.downcast::<Vec<i32>>() {
        Ok(v) => return F32.give(<f32 as AsBits>::from_bits(<i32 as AsBits>::into_bits(*v))),
        Err(a) => a,
    };
    let any = match any.downcast::<Vec<u8>>() {
        Ok(v) => return BYTES.give(*v),
        Err(a) => a,
    };
    if let Ok(v) = any.downcast::<Vec<i8>>() {
        BYTES.give(<i8 as AsBits>::into_bits(*v));
    }
}

/// Hands the storage of a tensor nobody else holds back to the pools.
pub fn recycle(t: super::Tensor) {
    use super::bits::AsBits;
    use super::Tensor;
    match t {
        Tensor::F32(a) => F32.give(a.into_raw_vec_and_offset().0),
        Tensor::F64(a) => F64.give(a.into_raw_vec_and_offset().0),
        Tensor::I32(a) => {
            let bits = <i32 as AsBits>::into_bits(a.into_raw_vec_and_offset().0);
            F32.give(<f32 as AsBits>::from_bits(bits));
        }
        Tensor::U8(a) => BYTES.give(a.into_raw_vec_and_offset().0),
        Tensor::I8(a) => BYTES.give(<i8 as AsBits>::into_bits(a.into_raw_vec_and_offset().0)),
        _ => {}
    }
}

/// Drops every held buffer (memory goes back to the allocator).
pub fn clear() {
    F32.clear();
    F64.clear();
    BYTES.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a taken buffer holds in this build: the poison in tests.
    const FILL: f32 = if cfg!(debug_assertions) { -1.0 } else { 0.0 };

    #[test]
    fn given_back_buffers_return_by_width() {
        // Lengths no other test uses: the pools are shared by every test.
        let ints: Vec<i32> = vec![5; 12_347];
        let ptr = ints.as_ptr() as usize;
        give_back(ints);
        let again: Vec<u32> = take_or_default(12_347);
        assert_eq!(again.as_ptr() as usize, ptr);
        let bytes: Vec<i8> = vec![1; 12_349];
        let ptr = bytes.as_ptr() as usize;
        give_back(bytes);
        let again: Vec<u8> = take_or_default(12_349);
        assert_eq!(again.as_ptr() as usize, ptr);
        // A type without a pool is dropped, not kept.
        give_back(vec![1u16; 12_351]);
        assert_eq!(take_or_default::<u16>(12_351), vec![0u16; 12_351]);
    }

    #[test]
    fn a_held_buffer_serves_requests_down_to_half_its_size_tightest_first() {
        let pool: Pool<f32> = Pool::new();
        let big = vec![1.0f32; 100];
        let (big_ptr, big_cap) = (big.as_ptr(), big.capacity());
        pool.give(big);
        // Less than half: a fresh buffer; half or more: the held one, cut.
        let small = pool.take(49, 0.0, -1.0);
        assert_ne!(small.as_ptr(), big_ptr);
        assert_eq!(small, vec![FILL; 49]);
        let cut = pool.take(50, 0.0, -1.0);
        assert_eq!((cut.as_ptr(), cut.len()), (big_ptr, 50));
        // Given back cut, it still serves its whole size, filled where it
        // was cut (the elements it still held keep their values).
        pool.give(cut);
        let whole = pool.take(100, 0.0, -1.0);
        assert_eq!((whole.as_ptr(), whole.len()), (big_ptr, 100));
        assert!(whole.capacity() == big_cap);
        if !cfg!(debug_assertions) {
            assert_eq!((whole[49], whole[50], whole[99]), (1.0, 0.0, 0.0));
        } else {
            assert!(whole.iter().all(|&v| v == FILL));
        }
        // Of two that fit, the tighter one.
        pool.give(whole);
        let tight = vec![2.0f32; 64];
        let tight_ptr = tight.as_ptr();
        pool.give(tight);
        let first = pool.take(60, 0.0, -1.0);
        let second = pool.take(60, 0.0, -1.0);
        assert_eq!((first.as_ptr(), second.as_ptr()), (tight_ptr, big_ptr));
        drop((first, second));
        // A cut buffer counts whole against the byte bound.
        let mut huge: Vec<f32> = Vec::with_capacity(MAX_BYTES / 4 + 1);
        huge.push(0.0);
        pool.give(huge);
        assert!(pool.buffers.lock().unwrap().is_empty());
    }

    #[test]
    fn buffers_are_matched_by_length_and_bounded() {
        let pool: Pool<f32> = Pool::new();
        let mut b = pool.take(10, 0.0, -1.0);
        assert_eq!(b, vec![FILL; 10]);
        b[3] = 7.0;
        let ptr = b.as_ptr();
        pool.give(b);
        // Another length gets a fresh buffer; the same length the held one.
        assert_eq!(pool.take(11, 0.0, -1.0), vec![FILL; 11]);
        let again = pool.take(10, 0.0, -1.0);
        assert_eq!(again.as_ptr(), ptr);
        // Tests see the poison even in a reused buffer.
        assert_eq!(again[3], if cfg!(debug_assertions) { -1.0 } else { 7.0 });
        assert!(pool.take(10, 0.0, -1.0).iter().all(|&v| v == FILL));
        // At most MAX_BUFFERS are kept.
        for _ in 0..MAX_BUFFERS + 5 {
            pool.give(vec![1.0; 4]);
        }
        assert_eq!(pool.buffers.lock().unwrap().len(), MAX_BUFFERS);
        // A buffer over the byte bound is never kept.
        pool.clear();
        pool.give(vec![0.0; MAX_BYTES / 4 + 1]);
        assert!(pool.buffers.lock().unwrap().is_empty());
    }

    /// A buffer given back serves a later request of its length for any
    /// type of its width: f32 storage for u32 and i32 (the bits path of the
    /// movement operators, int8 layers' accumulators), f64 for u64, and one
    /// bytes pool for u8 and i8.
    #[test]
    fn buffers_are_shared_by_width() {
        let b = vec![1.5f32; 4099];
        let ptr = b.as_ptr() as usize;
        F32.give(b);
        let u = take_or_default::<u32>(4099);
        assert_eq!(u.as_ptr() as usize, ptr);
        let b = vec![7i32; 4101];
        let ptr = b.as_ptr() as usize;
        recycle(crate::tensor::Tensor::from_vec(&[4101], b).unwrap());
        let i = take_or_default::<i32>(4101);
        assert_eq!(i.as_ptr() as usize, ptr);
        let d = vec![2.0f64; 4097];
        let ptr = d.as_ptr() as usize;
        F64.give(d);
        let w = take_or_default::<u64>(4097);
        assert_eq!(w.as_ptr() as usize, ptr);
        let q = vec![-3i8; 4103];
        let ptr = q.as_ptr() as usize;
        recycle(crate::tensor::Tensor::from_vec(&[4103], q).unwrap());
        let u = take_or_default::<u8>(4103);
        assert_eq!(u.as_ptr() as usize, ptr);
        let poison = if cfg!(debug_assertions) {
            0xA5
        } else {
            (-3i8) as u8
        };
        assert!(u.iter().all(|&v| v == poison));
        recycle(crate::tensor::Tensor::from_vec(&[4103], u).unwrap());
        let s = take_or_default::<i8>(4103);
        assert_eq!(s.as_ptr() as usize, ptr);
    }

    #[test]
    fn any_type_gets_a_buffer_of_its_length() {
        assert_eq!(take_or_default::<i64>(3), vec![0i64; 3]);
        assert_eq!(take_or_default::<f64>(5).len(), 5);
        assert_eq!(take_or_default::<f32>(0), Vec::<f32>::new());
        assert_eq!(take_or_default::<i16>(2), vec![0i16; 2]);
    }
}
