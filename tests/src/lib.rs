//! Harness for lq's privileged tests and benchmarks: network namespaces that clean up after
//! themselves, a frame builder for crafted packets, and the XDP receiver under TestRun.
//!
//! Everything here runs only inside network namespaces it creates (and always deletes) or
//! on BPF_PROG_TEST_RUN; nothing touches the root namespace's links, routes or sysctls.
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

pub mod bench;
pub mod daemon;
pub mod fabric;
pub mod frr;
pub mod gnmi;
pub mod netns;
pub mod nexthop_listener;
pub mod packet;
pub mod pfc;
pub mod poll;
pub mod xdp;

/// Fails loudly when not root: these tests need CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "privileged tests must run as root: use `cargo xtask test`"
    );
}

/// A name unique to this process and call, for namespaces and pin folders.
pub fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Validates RFC 7951 JSON instance data against the module in `yang/` with yanglint, the
/// independent judge (libyang). Returns yanglint's complaint on failure.
pub fn yanglint_data(json: &serde_json::Value) -> anyhow::Result<()> {
    yanglint("data", json)
}

/// Validates an RFC 7951 JSON notification (`lq-threshold-crossed`) with yanglint.
pub fn yanglint_notification(json: &serde_json::Value) -> anyhow::Result<()> {
    yanglint("notif", json)
}

/// yanglint `-t KIND` on `json` against the ietf-lq-telemetry module in `yang/` and lq's
/// augment of it, lq-weighted-ecmp.
fn yanglint(kind: &str, json: &serde_json::Value) -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../yang");
    let file = std::env::temp_dir().join(format!("{}.json", unique_name("lq-yang")));
    std::fs::write(&file, serde_json::to_string_pretty(json)?)?;
    let out = std::process::Command::new("yanglint")
        .arg("-p")
        .arg(&dir)
        .args(["-t", kind])
        .arg(dir.join("ietf-lq-telemetry@2026-07-07.yang"))
        // lq's augment: a load-balancer's groups, capacities and their sources.
        .arg(dir.join("lq-weighted-ecmp@2026-12-05.yang"))
        .arg(dir.join("lq-authentication@2026-12-05.yang"))
        .arg(&file)
        .output()
        .map_err(|e| {
            anyhow::anyhow!("yanglint (libyang2-tools; `cargo xtask setup` installs it): {e}")
        })?;
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        anyhow::bail!(
            "yanglint refused the data ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
