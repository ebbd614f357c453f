//! `lqd show paths | counters | neighbors` read straight from the pinned maps: no daemon
//! needed, and the table survives a crash. The views render what is read here.

use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use crate::{
    sys::{bpf::path_table::TableReader, clock::monotonic_ns},
    views::show,
};

/// The path quality table with its effective values (seed 003 section 6.5).
pub fn paths(pin_dir: &Path) -> Result<Value> {
    let reader = TableReader::open(pin_dir)?;
    let now = monotonic_ns();
    Ok(show::paths_json(&reader.effective_paths(now)?, now))
}

/// The XDP receiver's counters, summed over CPUs.
pub fn counters(pin_dir: &Path) -> Result<Value> {
    Ok(show::counters_json(
        &TableReader::open(pin_dir)?.counters()?,
    ))
}

/// The neighbors, failed when silent for more than the configured dead interval.
pub fn neighbors(pin_dir: &Path) -> Result<Value> {
    let reader = TableReader::open(pin_dir)?;
    let dead = reader.config()?.dead_interval_ns;
    Ok(show::neighbors_from_table(
        &reader.neighbors()?,
        dead,
        monotonic_ns(),
    ))
}
