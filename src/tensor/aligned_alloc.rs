//! [`AlignedAllocator`]: a global allocator that starts every block of
//! [`MIN_SIZE`] bytes or more on a cache line, so that tensors begin on a
//! 64-byte boundary.
//!
//! A tensor's storage is a `Vec` whose element type asks for 4 bytes of
//! alignment; glibc's allocator gives 16, and the blocks it maps for large
//! requests start 16 bytes past a page. Every 64-byte vector load of such
//! a tensor then spans two cache lines. Inside MobileNet v3 (one thread,
//! per-node trace, Sapphire Rapids-class Xeon) the convolutions ran 10 to
//! 45 % slower on the allocator's addresses than on aligned ones: a chain
//! of six of its layers took 0.685 ms against 0.427. The kernels cannot
//! realign what they are given, and a `Vec` cannot start inside its own
//! block, so the alignment has to come from the allocator.
//!
//! The `ramify` command line and the C library install it; a Rust program
//! that embeds ramify installs it with two lines (see the example). It
//! wraps the system allocator and changes nothing for blocks under
//! [`MIN_SIZE`] bytes.

use std::alloc::{GlobalAlloc, Layout, System};

/// Smallest block, in bytes, that is aligned to [`ALIGN`]: one page. A
/// smaller tensor spans few vectors, and small blocks (names, shapes)
/// keep the system allocator's fast path.
pub const MIN_SIZE: usize = 4096;
/// Alignment of large blocks: one cache line, one AVX-512 vector.
pub const ALIGN: usize = 64;

/// The system allocator, with blocks of [`MIN_SIZE`] bytes or more aligned
/// to [`ALIGN`] bytes.
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: ramify::AlignedAllocator = ramify::AlignedAllocator;
///
/// fn main() {
///     let tensor = vec![0f32; 1 << 16];
///     assert_eq!(tensor.as_ptr() as usize % 64, 0);
/// }
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct AlignedAllocator;

/// The layout a request is served with: `layout` itself, or for a large
/// block with less alignment, the same size aligned to [`ALIGN`]. A
/// function of the request alone, so that a block is freed with the
/// layout it was allocated with.
fn widened(layout: Layout) -> Layout {
    if layout.size() >= MIN_SIZE && layout.align() < ALIGN {
        Layout::from_size_align(layout.size(), ALIGN).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every block is allocated and freed by `System` with
// `widened(layout)`, which depends on the caller's layout only, so the
// system allocator sees matching layouts; the alignment it returns is at
// least the one asked for.
unsafe impl GlobalAlloc for AlignedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `widened` keeps the size (non-zero, as the caller
        // guarantees) and gives a valid layout.
        unsafe { System.alloc(widened(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(widened(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `widened(layout)`.
        unsafe { System.dealloc(ptr, widened(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees that `new_size` with the block's
        // alignment makes a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (was, will) = (widened(layout), widened(new));
        if was.align() == will.align() {
            // SAFETY: `ptr` was allocated by `System` with `was`, and the
            // new size keeps the alignment `System` is asked for.
            return unsafe { System.realloc(ptr, was, new_size) };
        }
        // The block crosses MIN_SIZE: move it to a block of the other
        // alignment.
        // SAFETY: `will` is valid and non-zero in size; both blocks hold
        // at least the bytes copied, and `ptr` is freed with its layout.
        unsafe {
            let moved = System.alloc(will);
            if !moved.is_null() {
                std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                System.dealloc(ptr, was);
            }
            moved
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Large blocks start on a cache line, small ones keep their own
    /// alignment, and growing or shrinking a block across `MIN_SIZE` keeps
    /// its contents.
    #[test]
    fn aligns_large_blocks_and_keeps_contents_across_sizes() {
        let a = AlignedAllocator;
        let sizes = [1, 24, MIN_SIZE - 1, MIN_SIZE, 10_000, 300_000, 5 << 20];
        // SAFETY: every layout is non-zero in size; each block is read and
        // written within its size and freed once, with its layout.
        unsafe {
            for &size in &sizes {
                let layout = Layout::from_size_align(size, 4).unwrap();
                let p = a.alloc(layout);
                assert!(!p.is_null());
                if size >= MIN_SIZE {
                    assert_eq!(p as usize % ALIGN, 0, "{size} bytes");
                } else {
                    assert_eq!(p as usize % 4, 0);
                }
                let z = a.alloc_zeroed(layout);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                a.dealloc(z, layout);
                // Fill, then walk the block through every other size.
                for i in 0..size {
                    *p.add(i) = (i % 251) as u8;
                }
                let (mut p, mut layout, mut kept) = (p, layout, size);
                for &next in sizes.iter().rev() {
                    p = a.realloc(p, layout, next);
                    assert!(!p.is_null());
                    if next >= MIN_SIZE {
                        assert_eq!(p as usize % ALIGN, 0, "{size} -> {next} bytes");
                    }
                    kept = kept.min(next);
                    let bytes = std::slice::from_raw_parts(p, kept);
                    assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
                    layout = Layout::from_size_align(next, 4).unwrap();
                }
                a.dealloc(p, layout);
            }
        }
    }

    /// A request for more alignment than `ALIGN` gets it.
    #[test]
    fn keeps_larger_alignments() {
        let a = AlignedAllocator;
        let layout = Layout::from_size_align(MIN_SIZE * 2, 4096).unwrap();
        // SAFETY: a non-zero layout, freed once with itself.
        unsafe {
            let p = a.alloc(layout);
            assert_eq!(p as usize % 4096, 0);
            a.dealloc(p, layout);
        }
    }
}
