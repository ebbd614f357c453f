//! tc counters that outlive `lqd` (issue 42): the PFC counter and the ECN-eligible counter
//! attach through tcx links pinned beside their maps, so they go on counting while `lqd`
//! is stopped, restarted or upgraded, and a starting `lqd` adopts them.
//!
//! A counter folder holds the counter's maps, [`COUNTER_META_MAP`] (the layout version of
//! those maps) and one link pin per interface and direction (`tcx-ingress-<iface>`,
//! `tcx-egress-<iface>`). A start:
//! 1. checks the layout ([`check_layout`]): pins of the same layout are adopted; pins of
//!    lqd before this layout (no meta map: its counter detached at exit, so nothing counted
//!    since) are removed, since they hold counts of a stopped counter; pins of another
//!    layout are refused, naming `lqd cleanup`, never read or written as this one;
//! 2. loads the object with the folder's maps ([`super::path_table::load_pinned`]);
//! 3. per interface ([`attach_or_adopt`]): a pinned link still attached to the interface
//!    is kept (the same program) or atomically switched to this build's program
//!    (`bpf_link_update`: not one packet misses a program); otherwise a new link is
//!    attached and pinned, and the caller starts that interface's counters anew.
//!
//! Removing a link pin detaches the program (`lqd cleanup`, [`release`]).

use std::path::{Path, PathBuf};

use aya::{
    Ebpf,
    maps::{Array, MapData},
    programs::{
        LinkOrder, ProgramError, SchedClassifier, TcAttachType,
        links::{FdLink, LinkError, PinnedLink},
        tc::{SchedClassifierLink, TcAttachOptions},
    },
};
use lq_common::maps::{COUNTER_META_MAP, COUNTER_PIN_LAYOUT};

/// Why a tc counter could not be attached or adopted.
#[derive(Debug, thiserror::Error)]
pub enum TcPinError {
    /// The pins were made by an lqd whose maps are laid out differently.
    #[error(
        "the counters pinned at {dir} have map layout {pinned}, this lqd uses layout {ours}: they cannot be adopted. Run `lqd cleanup --pin-dir {dir}` to detach and remove them (their counts are lost: counting starts at zero in a new epoch), or run the lqd that made them"
    )]
    Layout {
        /// The folder.
        dir: PathBuf,
        /// The pinned layout version.
        pinned: u32,
        /// This build's.
        ours: u32,
    },
    /// A program operation failed.
    #[error("{what}")]
    Program {
        /// What was being done.
        what: String,
        /// The cause.
        source: ProgramError,
    },
    /// A link operation failed.
    #[error("{what}")]
    Link {
        /// What was being done.
        what: String,
        /// The cause.
        source: LinkError,
    },
    /// A pin could not be made, read or removed.
    #[error("{what} {}", path.display())]
    Pin {
        /// What was being done.
        what: &'static str,
        /// The pin.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The layout map could not be read or written.
    #[error("map {COUNTER_META_MAP}")]
    Meta(#[source] aya::maps::MapError),
}

/// The pin of the link that attaches a counter to `iface` at `at`, in `dir`.
pub fn link_pin(dir: &Path, at: TcAttachType, iface: &str) -> PathBuf {
    let side = match at {
        TcAttachType::Egress => "egress",
        _ => "ingress",
    };
    dir.join(format!("tcx-{side}-{iface}"))
}

/// What the pins in a counter folder allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// No counter pins: a first start (or after `lqd cleanup`).
    Empty,
    /// Pins of this layout: adopt them.
    Same,
    /// Pins of lqd before [`COUNTER_PIN_LAYOUT`] 2, whose counter detached when it exited:
    /// removed (they hold the counts of a counter that has stopped).
    RemovedStopped,
}

/// Checks the layout of the pins in `dir` against this build's, before the object is loaded
/// with them. `maps` are the counter's own map pins (without the meta map).
pub fn check_layout(dir: &Path, maps: &[&'static str]) -> Result<Layout, TcPinError> {
    let meta = dir.join(COUNTER_META_MAP);
    let any_map = maps.iter().any(|m| dir.join(m).exists());
    if !meta.exists() {
        if !any_map {
            return Ok(Layout::Empty);
        }
        for m in maps {
            let path = dir.join(m);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(TcPinError::Pin {
                        what: "removing the stopped counter's pin",
                        path,
                        source,
                    });
                }
            }
        }
        return Ok(Layout::RemovedStopped);
    }
    let pinned = read_layout(&meta)?;
    if pinned != COUNTER_PIN_LAYOUT {
        return Err(TcPinError::Layout {
            dir: dir.into(),
            pinned,
            ours: COUNTER_PIN_LAYOUT,
        });
    }
    Ok(Layout::Same)
}

fn read_layout(meta: &Path) -> Result<u32, TcPinError> {
    let data = MapData::from_pin(meta).map_err(TcPinError::Meta)?;
    let array: Array<MapData, u32> =
        Array::try_from(aya::maps::Map::Array(data)).map_err(TcPinError::Meta)?;
    array.get(&0, 0).map_err(TcPinError::Meta)
}

/// Writes this build's layout into the loaded object's meta map (pinned in the folder).
pub fn write_layout(ebpf: &mut Ebpf) -> Result<(), TcPinError> {
    let map = ebpf.map_mut(COUNTER_META_MAP).ok_or(TcPinError::Meta(
        aya::maps::MapError::InvalidName {
            name: COUNTER_META_MAP.into(),
        },
    ))?;
    let mut array: Array<&mut MapData, u32> = Array::try_from(map).map_err(TcPinError::Meta)?;
    array
        .set(0, COUNTER_PIN_LAYOUT, 0)
        .map_err(TcPinError::Meta)
}

/// How a counter came to count on an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attachment {
    /// A pinned link of a previous run still counts there with this very program: kept.
    Adopted,
    /// A pinned link of a previous run still counts there with another build of the
    /// program: switched to this build's atomically, so no packet missed a program.
    Upgraded {
        /// The kernel id of the program it ran.
        previous_program: u32,
    },
    /// Nothing counted there: a new link, pinned. The caller starts the counters anew.
    Attached(Fresh),
    /// tcx is unavailable (kernel before 6.6): a clsact filter, which detaches when lqd
    /// exits. The caller starts the counters anew at every start.
    Clsact,
}

impl Attachment {
    /// Whether counting went on without a gap from before this start.
    pub fn continued(self) -> bool {
        matches!(self, Self::Adopted | Self::Upgraded { .. })
    }
}

/// Why a new link was needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fresh {
    /// No pinned link for the interface.
    NoPin,
    /// A pinned link whose program no longer runs on the interface (it was deleted and
    /// created anew, or the link was detached by hand): it was removed.
    Detached,
}

impl Fresh {
    /// For logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoPin => "no pinned link: nothing counted here before",
            Self::Detached => {
                "the pinned link no longer counted on this interface (recreated or detached)"
            }
        }
    }
}

/// Attaches `prog` (loaded) to `iface` at `at`, adopting the link pinned at `pin` when it
/// still counts there (see the module).
pub fn attach_or_adopt(
    prog: &mut SchedClassifier,
    iface: &str,
    at: TcAttachType,
    pin: &Path,
) -> Result<Attachment, TcPinError> {
    let fresh = match adopt(prog, iface, at, pin)? {
        Ok(a) => return Ok(a),
        Err(fresh) => fresh,
    };
    let prog_err = |what: String| move |source| TcPinError::Program { what, source };
    match prog.attach_with_options(iface, at, TcAttachOptions::TcxOrder(LinkOrder::default())) {
        Ok(id) => {
            let link = prog
                .take_link(id)
                .map_err(prog_err(format!("taking the new link on {iface}")))?;
            let fd: FdLink = link.try_into().map_err(|source| TcPinError::Link {
                what: format!("the new link on {iface}"),
                source,
            })?;
            // Dropped at once: the pin keeps the link, and with it the program, attached.
            fd.pin(pin).map_err(|e| TcPinError::Pin {
                what: "pinning the link",
                path: pin.into(),
                source: std::io::Error::other(e.to_string()),
            })?;
            Ok(Attachment::Attached(fresh))
        }
        Err(tcx) => {
            tracing::warn!(%iface, error = %tcx, "tcx attach failed; falling back to a clsact qdisc (the counter detaches when lqd exits)");
            // EEXIST: the qdisc is already there.
            let _ = aya::programs::tc::qdisc_add_clsact(iface);
            prog.attach_with_options(iface, at, TcAttachOptions::Netlink(Default::default()))
                .map_err(prog_err(format!("attaching to {iface} (clsact)")))?;
            Ok(Attachment::Clsact)
        }
    }
}

/// The adoption half of [`attach_or_adopt`]: `Ok(Err(why))` when a new link is needed.
fn adopt(
    prog: &mut SchedClassifier,
    iface: &str,
    at: TcAttachType,
    pin: &Path,
) -> Result<Result<Attachment, Fresh>, TcPinError> {
    if !pin.exists() {
        return Ok(Err(Fresh::NoPin));
    }
    let link_err = |what: &str| {
        let what = format!("{what} {}", pin.display());
        move |source| TcPinError::Link { what, source }
    };
    let fd: FdLink = PinnedLink::from_pin(pin)
        .map_err(link_err("opening the pinned link"))?
        .into();
    let linked = fd.info().map_err(link_err("reading the pinned link"))?;
    let running = linked.program_id();
    // The link counts on this interface if its program is among those tcx runs there (a
    // link whose device went away is detached; its program id no longer appears).
    let theirs = SchedClassifier::query_tcx(iface, at)
        .ok()
        .and_then(|(_, progs)| progs.into_iter().find(|p| p.id() == running));
    let Some(theirs) = theirs else {
        drop(fd);
        std::fs::remove_file(pin).map_err(|source| TcPinError::Pin {
            what: "removing the detached link",
            path: pin.into(),
            source,
        })?;
        return Ok(Err(Fresh::Detached));
    };
    let ours = prog.info().map_err(|source| TcPinError::Program {
        what: "reading this build's program".into(),
        source,
    })?;
    if theirs.tag() == ours.tag() {
        return Ok(Ok(Attachment::Adopted));
    }
    let link = SchedClassifierLink::try_from(fd).map_err(link_err("the pinned link"))?;
    prog.attach_to_link(link)
        .map_err(|source| TcPinError::Program {
            what: format!("switching the pinned link on {iface} to this build's program"),
            source,
        })?;
    Ok(Ok(Attachment::Upgraded {
        previous_program: running,
    }))
}

/// Detaches and removes every counter link pinned in `dir` whose interface is not in
/// `keep` (interfaces no longer configured), and returns their interface names.
pub fn release_others(dir: &Path, at: TcAttachType, keep: &[&str]) -> Vec<String> {
    let prefix = link_pin(Path::new(""), at, "");
    let prefix = prefix.to_string_lossy().into_owned();
    let mut released = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return released;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(iface) = name.strip_prefix(&prefix) else {
            continue;
        };
        if keep.contains(&iface) {
            continue;
        }
        if std::fs::remove_file(e.path()).is_ok() {
            released.push(iface.to_owned());
        }
    }
    released
}

/// Detaches every counter link pinned in `dir` and removes the folder's pins (`lqd
/// cleanup`). Returns the pins removed.
pub fn release(dir: &Path) -> Result<Vec<PathBuf>, std::io::Error> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        if e.file_type()?.is_dir() {
            continue;
        }
        std::fs::remove_file(e.path())?;
        removed.push(e.path());
    }
    removed.sort();
    Ok(removed)
}
