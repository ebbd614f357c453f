//! `lqd cleanup`: detaches the counters an instance left counting and removes its pins
//! (issue 42). The PFC and ECN-eligible counters outlive lqd on purpose (their tcx links
//! are pinned, so a restart loses no count); this is how an operator stops them for good,
//! uninstalls lq, or clears pins of another layout that a new lqd refuses to adopt.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Why a cleanup did not run or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    /// The instance's daemon answers on its control socket.
    #[error(
        "lqd instance {instance} is running (its control socket {} answers): stop it first (`systemctl stop lqd@{instance}` or SIGTERM); cleanup would detach the counters under it",
        socket.display()
    )]
    Running {
        /// The instance.
        instance: String,
        /// Its control socket.
        socket: PathBuf,
    },
    /// A pin or folder could not be removed.
    #[error("removing the pins in {}", dir.display())]
    Remove {
        /// The folder.
        dir: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Removes every pin in `dirs` and their subfolders (removing a link's pin detaches its
/// program), then the emptied folders. Returns `{"removed": [...], "folders": [...]}`.
pub fn cleanup(
    instance: &str,
    socket: &Path,
    dirs: &[PathBuf],
    dry_run: bool,
) -> Result<Value, CleanupError> {
    if std::os::unix::net::UnixStream::connect(socket).is_ok() {
        return Err(CleanupError::Running {
            instance: instance.into(),
            socket: socket.into(),
        });
    }
    let mut removed = Vec::new();
    let mut folders = Vec::new();
    for dir in dirs {
        let mut stack = vec![dir.clone()];
        let mut order = Vec::new();
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            order.push(d.clone());
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        // Deepest folders first, so each is empty when it is removed.
        for d in order.iter().rev() {
            let pins = if dry_run {
                list_pins(d)
            } else {
                crate::sys::bpf::tc_pinned::release(d)
            }
            .map_err(|source| CleanupError::Remove {
                dir: d.clone(),
                source,
            })?;
            removed.extend(pins.into_iter().map(|p| p.display().to_string()));
            if !dry_run {
                std::fs::remove_dir(d).map_err(|source| CleanupError::Remove {
                    dir: d.clone(),
                    source,
                })?;
            }
            folders.push(d.display().to_string());
        }
    }
    Ok(json!({ "instance": instance, "dry-run": dry_run, "removed": removed, "folders": folders }))
}

fn list_pins(dir: &Path) -> Result<Vec<PathBuf>, std::io::Error> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.path())
        .collect();
    v.sort();
    Ok(v)
}

/// The text form of [`cleanup`]'s answer.
pub fn cleanup_text(v: &Value) -> String {
    let verb = if v["dry-run"] == true {
        "would remove"
    } else {
        "removed"
    };
    let removed = v["removed"].as_array().map_or(0, Vec::len);
    let mut out = String::new();
    if removed == 0 && v["folders"].as_array().is_none_or(Vec::is_empty) {
        out.push_str(&format!(
            "instance {}: no pins found; nothing to do\n",
            v["instance"].as_str().unwrap_or("?")
        ));
        return out;
    }
    for p in v["removed"].as_array().into_iter().flatten() {
        out.push_str(&format!("{verb} {}\n", p.as_str().unwrap_or("?")));
    }
    out.push_str(&format!(
        "instance {}: {verb} {removed} pins; counters whose link pins went are detached\n",
        v["instance"].as_str().unwrap_or("?")
    ));
    out
}
