//! The two atomic operations the path table's row claims need (`BPF_ATOMIC` with
//! `BPF_FETCH`, kernel 5.12), written as the instructions themselves: the object is built
//! for `--cpu generic`, for which `core` has no atomic types and LLVM refuses an atomic
//! add whose result is used.

use core::arch::asm;

/// Adds `v` to `*p` atomically; returns the value before.
///
/// # Safety
///
/// `p` must be a valid, 8-octet aligned pointer to a `u64` in map memory.
#[inline(always)]
pub unsafe fn fetch_add_u64(p: *mut u64, v: u64) -> u64 {
    let mut r = v;
    // SAFETY: the caller's contract; the instruction reads and writes only `*p`.
    unsafe {
        asm!(
            "{r} = atomic_fetch_add((u64 *)({p} + 0), {r})",
            p = in(reg) p,
            r = inout(reg) r,
            options(nostack),
        );
    }
    r
}

/// Stores `new` in `*p` if it holds `old`, atomically; returns the value `*p` held (equal
/// to `old` when the store happened).
///
/// # Safety
///
/// `p` must be a valid, 8-octet aligned pointer to a `u64` in map memory.
#[inline(always)]
pub unsafe fn compare_exchange_u64(p: *mut u64, old: u64, new: u64) -> u64 {
    let mut r0 = old;
    // SAFETY: the caller's contract; the instruction reads and writes only `*p` (and R0,
    // its implicit operand).
    unsafe {
        asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") r0,
            options(nostack),
        );
    }
    r0
}
