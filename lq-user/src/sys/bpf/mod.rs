//! The eBPF programs and their pinned maps, through aya: the XDP receiver and its path
//! table ([`path_table`]), the PFC tc counter ([`pfc`]), the helper's ECN-eligible packet
//! counter ([`ecn`]). Both report program and map
//! failures with the same two errors, [`ProgramOpError`] and [`MapOpError`].

pub mod ecn;
pub mod path_table;
pub mod pfc;
pub mod tc_pinned;

use aya::{
    maps::MapError,
    programs::{LinkOrder, ProgramError, SchedClassifier, TcAttachType, tc, tc::TcAttachOptions},
};

/// A program operation (load, attach, ...) failed.
#[derive(Debug, thiserror::Error)]
#[error("{kind} program: {what}")]
pub struct ProgramOpError {
    /// Which program ("XDP", "tc").
    pub kind: &'static str,
    /// What was being done.
    pub what: String,
    /// The cause.
    #[source]
    pub source: ProgramError,
}

/// A map operation failed.
#[derive(Debug, thiserror::Error)]
#[error("map {map}")]
pub struct MapOpError {
    /// The map name.
    pub map: &'static str,
    /// The cause.
    #[source]
    pub source: MapError,
}

/// `map_err` for a failed operation on `map`, into any error that holds a [`MapOpError`].
pub(crate) fn map_err<E: From<MapOpError>>(map: &'static str) -> impl FnOnce(MapError) -> E {
    move |source| MapOpError { map, source }.into()
}

/// `map_err` for a failed `what` on a `kind` program.
pub(crate) fn program_err<E: From<ProgramOpError>>(
    kind: &'static str,
    what: impl Into<String>,
) -> impl FnOnce(ProgramError) -> E {
    let what = what.into();
    move |source| ProgramOpError { kind, what, source }.into()
}

/// `union bpf_attr` for BPF_MAP_*_BATCH (linux/bpf.h, `batch`).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// BPF_MAP_LOOKUP_BATCH (linux/bpf.h `enum bpf_cmd`).
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// Reads every element of the map `fd` into `keys` and `values` (as many as they hold:
/// `keys.len() / key_size`, elements of `key_size` and `value_size` octets; a per-CPU map's
/// value is its value size rounded up to 8, times the possible CPUs) with as few
/// BPF_MAP_LOOKUP_BATCH calls as the kernel allows (usually one), and returns how many it
/// read. The batch cursor is a `u32`: an array's index, a hash map's bucket.
pub(crate) fn lookup_batch(
    fd: std::os::fd::BorrowedFd<'_>,
    keys: &mut [u8],
    key_size: usize,
    values: &mut [u8],
    value_size: usize,
) -> Result<usize, std::io::Error> {
    use std::os::fd::AsRawFd;
    let len = (keys.len() / key_size).min(values.len() / value_size);
    let (mut done, mut cursor_in, mut cursor_out) = (0usize, 0u32, 0u32);
    while done < len {
        let mut attr = BatchAttr {
            in_batch: if done == 0 {
                0
            } else {
                (&raw const cursor_in) as u64
            },
            out_batch: (&raw mut cursor_out) as u64,
            keys: keys[done * key_size..].as_mut_ptr() as u64,
            values: values[done * value_size..].as_mut_ptr() as u64,
            count: (len - done) as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..BatchAttr::default()
        };
        // SAFETY: attr is a valid bpf_attr prefix for this command; keys and values have
        // room for `count` elements of the map's key and value sizes (the caller's
        // contract); cursor_in and cursor_out outlive the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                (&raw mut attr).cast::<libc::c_void>(),
                size_of::<BatchAttr>() as libc::c_uint,
            )
        };
        let err = (r < 0).then(std::io::Error::last_os_error);
        done += attr.count as usize;
        match err {
            None if attr.count == 0 => break,
            None => cursor_in = cursor_out,
            // ENOENT: the last batch (its elements are in `count`).
            Some(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
            Some(e) => return Err(e),
        }
    }
    Ok(done)
}

/// [`lookup_batch`] into typed buffers: as many elements as both `keys` and `values` hold,
/// each value one `V` (not for per-CPU maps, whose value is one per CPU).
pub(crate) fn lookup_batch_into<K: aya::Pod, V: aya::Pod>(
    fd: std::os::fd::BorrowedFd<'_>,
    keys: &mut [K],
    values: &mut [V],
) -> Result<usize, std::io::Error> {
    let (key_octets, value_octets) = (size_of_val(keys), size_of_val(values));
    // SAFETY: K and V are plain old data (aya::Pod): their octets may be written with any
    // values; each byte view covers exactly its slice and lives only for this call.
    let (keys, values) = unsafe {
        (
            std::slice::from_raw_parts_mut(keys.as_mut_ptr().cast::<u8>(), key_octets),
            std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), value_octets),
        )
    };
    lookup_batch(fd, keys, size_of::<K>(), values, size_of::<V>())
}

/// [`lookup_batch`] for a per-CPU map whose value is one `u64` per CPU (counters): reads
/// as many elements as `keys` holds, each value summed over the `cpus` possible CPUs
/// (wrapping) into `sums`; `per_cpu` is the kernel's copy, `keys.len() * cpus` long at
/// least. Returns how many elements it read. One system call where a lookup per key was
/// one each (the receiver's 17 counters, the ECN counter's links).
pub(crate) fn lookup_batch_per_cpu_sums<K: aya::Pod>(
    fd: std::os::fd::BorrowedFd<'_>,
    keys: &mut [K],
    cpus: usize,
    per_cpu: &mut [u64],
    sums: &mut [u64],
) -> Result<usize, std::io::Error> {
    let cpus = cpus.max(1);
    let len = keys.len().min(sums.len()).min(per_cpu.len() / cpus);
    let (key_octets, value_octets) = (len * size_of::<K>(), len * cpus * size_of::<u64>());
    // SAFETY: K and u64 are plain old data (aya::Pod): their octets may be written with any
    // values; each byte view covers part of its slice (len elements) and lives only for
    // this call.
    let (key_bytes, value_bytes) = unsafe {
        (
            std::slice::from_raw_parts_mut(keys.as_mut_ptr().cast::<u8>(), key_octets),
            std::slice::from_raw_parts_mut(per_cpu.as_mut_ptr().cast::<u8>(), value_octets),
        )
    };
    let n = lookup_batch(
        fd,
        key_bytes,
        size_of::<K>(),
        value_bytes,
        cpus * size_of::<u64>(),
    )?;
    for (sum, values) in sums.iter_mut().zip(per_cpu.chunks_exact(cpus)).take(n) {
        *sum = values.iter().fold(0u64, |a, v| a.wrapping_add(*v));
    }
    Ok(n)
}

/// How a tc program ended up attached to an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcMode {
    /// A tcx link (kernel >= 6.6).
    Tcx,
    /// A clsact qdisc with a direct-action filter (older kernels).
    Clsact,
}

/// Attaches the tc program `prog` to `iface` at `at`: a tcx link, or where tcx is refused
/// (kernels before 6.6), a direct-action filter on a clsact qdisc (created if missing).
pub(crate) fn attach_tc(
    prog: &mut SchedClassifier,
    iface: &str,
    at: TcAttachType,
) -> Result<TcMode, ProgramError> {
    match prog.attach_with_options(iface, at, TcAttachOptions::TcxOrder(LinkOrder::default())) {
        Ok(_) => Ok(TcMode::Tcx),
        Err(tcx) => {
            tracing::warn!(%iface, error = %tcx, "tcx attach failed; falling back to a clsact qdisc");
            // EEXIST: the qdisc is already there.
            let _ = tc::qdisc_add_clsact(iface);
            prog.attach_with_options(iface, at, TcAttachOptions::Netlink(Default::default()))?;
            Ok(TcMode::Clsact)
        }
    }
}
