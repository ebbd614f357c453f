//! The eBPF programs and their pinned maps, through aya: the XDP receiver and its path
//! table ([`path_table`]), the PFC tc counter ([`pfc`]). Both report program and map
//! failures with the same two errors, [`ProgramOpError`] and [`MapOpError`].

pub mod path_table;
pub mod pfc;

use aya::{maps::MapError, programs::ProgramError};

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
