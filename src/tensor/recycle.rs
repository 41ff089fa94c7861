//! Recycled float buffers: the executor hands back the storage of every
//! intermediate tensor it frees, and kernels that overwrite every element
//! of their output take their output buffer from here. A model runs the
//! same shapes every time, so after the first run each output buffer is a
//! buffer of the same size freed earlier in the run (or the previous run):
//! no zero-fill and no fresh pages to fault in on the hot path. Buffers are
//! matched by length; the pool holds at most [`MAX_BUFFERS`] buffers and
//! [`MAX_BYTES`] bytes, so it cannot grow without bound.

use std::sync::Mutex;

/// Most buffers kept per element type.
pub const MAX_BUFFERS: usize = 64;
/// Most bytes kept per element type.
pub const MAX_BYTES: usize = 64 << 20;

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

    /// A buffer of exactly `len` elements (contents unspecified, initialised)
    /// if one of that length is held, else a new one filled with `zero`.
    fn take(&self, len: usize, zero: T) -> Vec<T> {
        if len > 0 {
            let mut held = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = held.iter().rposition(|b| b.len() == len) {
                return held.swap_remove(i);
            }
        }
        vec![zero; len]
    }

    /// Keeps `buf` for a later [`Pool::take`] when there is room.
    fn give(&self, buf: Vec<T>) {
        let size = std::mem::size_of::<T>().max(1);
        if buf.is_empty() || buf.len() > MAX_BYTES / size {
            return;
        }
        let mut held = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let bytes: usize = held.iter().map(|b| b.len() * size).sum();
        if held.len() >= MAX_BUFFERS || bytes + buf.len() * size > MAX_BYTES {
            // Full: the oldest buffer makes room when it is no larger.
            match held.first() {
                Some(old) if old.len() <= buf.len() => {
                    held.remove(0);
                }
                _ => return,
            }
            let bytes: usize = held.iter().map(|b| b.len() * size).sum();
            if bytes + buf.len() * size > MAX_BYTES {
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

static F32: Pool<f32> = Pool::new();
static F64: Pool<f64> = Pool::new();

/// Element types with a recycling pool.
pub trait Recycled: Copy + Sized {
    /// A buffer of `len` elements whose contents are unspecified (but
    /// initialised): the caller must write every element before reading it.
    fn take_buffer(len: usize) -> Vec<Self>;
}

impl Recycled for f32 {
    fn take_buffer(len: usize) -> Vec<f32> {
        F32.take(len, 0.0)
    }
}

impl Recycled for f64 {
    fn take_buffer(len: usize) -> Vec<f64> {
        F64.take(len, 0.0)
    }
}

/// A buffer of `len` elements of any type for a kernel that writes every
/// element: recycled when `T` has a pool (f32, f64), else default-filled.
/// u32 and u64 take f32 and f64 buffers: the operators that move elements
/// as bits of their width (`tensor::bits`) fill f32 and f64 outputs that way.
pub fn take_or_default<T: Clone + Default + 'static>(len: usize) -> Vec<T> {
    use super::bits::AsBits;
    use std::any::{Any, TypeId};
    let id = TypeId::of::<T>();
    let pooled: Option<Box<dyn Any>> = if id == TypeId::of::<f32>() {
        Some(Box::new(F32.take(len, 0.0)))
    } else if id == TypeId::of::<f64>() {
        Some(Box::new(F64.take(len, 0.0)))
    } else if id == TypeId::of::<u32>() {
        Some(Box::new(<f32 as AsBits>::into_bits(F32.take(len, 0.0))))
    } else if id == TypeId::of::<u64>() {
        Some(Box::new(<f64 as AsBits>::into_bits(F64.take(len, 0.0))))
    } else {
        None
    };
    match pooled.map(|b| b.downcast::<Vec<T>>()) {
        Some(Ok(v)) => *v,
        _ => vec![T::default(); len],
    }
}

/// Hands the storage of a tensor nobody else holds back to the pools.
pub fn recycle(t: super::Tensor) {
    match t {
        super::Tensor::F32(a) => F32.give(a.into_raw_vec_and_offset().0),
        super::Tensor::F64(a) => F64.give(a.into_raw_vec_and_offset().0),
        _ => {}
    }
}

/// Drops every held buffer (memory goes back to the allocator).
pub fn clear() {
    F32.clear();
    F64.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_matched_by_length_and_bounded() {
        let pool: Pool<f32> = Pool::new();
        let mut b = pool.take(10, 0.0);
        assert_eq!(b, vec![0.0; 10]);
        b[3] = 7.0;
        let ptr = b.as_ptr();
        pool.give(b);
        // Another length gets a fresh zeroed buffer; the same length the held one.
        assert_eq!(pool.take(11, 0.0), vec![0.0; 11]);
        let again = pool.take(10, 0.0);
        assert_eq!(again.as_ptr(), ptr);
        assert_eq!(again[3], 7.0);
        assert!(pool.take(10, 0.0).iter().all(|&v| v == 0.0));
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

    /// An f32 buffer given back serves a later u32 request of its length
    /// (the bits path of the movement operators), the same storage.
    #[test]
    fn bit_buffers_come_from_the_float_pools() {
        let b = vec![1.5f32; 4099];
        let ptr = b.as_ptr() as usize;
        F32.give(b);
        let u = take_or_default::<u32>(4099);
        assert_eq!(u.as_ptr() as usize, ptr);
        assert_eq!(u[0], 1.5f32.to_bits());
        let d = vec![2.0f64; 4097];
        let ptr = d.as_ptr() as usize;
        F64.give(d);
        let w = take_or_default::<u64>(4097);
        assert_eq!(w.as_ptr() as usize, ptr);
    }

    #[test]
    fn any_type_gets_a_buffer_of_its_length() {
        assert_eq!(take_or_default::<i64>(3), vec![0i64; 3]);
        assert_eq!(take_or_default::<f64>(5).len(), 5);
        assert_eq!(take_or_default::<f32>(0), Vec::<f32>::new());
    }
}
