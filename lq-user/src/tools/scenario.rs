//! `lqd sim SCENARIO`: the scenario file read from disk; the simulator itself is the pure
//! [`crate::core::sim`].

use std::path::Path;

use crate::core::sim::{Scenario, SimError};

/// Reads and validates a scenario file.
pub fn load(path: impl AsRef<Path>) -> Result<Scenario, SimError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| SimError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let mut s = Scenario::parse(&text, &path.display().to_string())?;
    if s.name.is_empty() {
        s.name = path
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    Ok(s)
}
