use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};
// A build-dependency only so that cargo reruns this script when lq-ebpf changes.
use lq_ebpf as _;

/// Builds the eBPF object (`lq-ebpf`, binary `lq`) with the nightly toolchain and
/// bpf-linker, into OUT_DIR, where `include_bytes_aligned!` embeds it in `lqd`.
fn main() -> anyhow::Result<()> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let root = std::path::Path::new(&manifest)
        .parent()
        .ok_or_else(|| anyhow!("lq-user has no parent directory"))?
        .join("lq-ebpf");
    let root = root.to_str().ok_or_else(|| anyhow!("non-UTF-8 path"))?;
    aya_build::build_ebpf(
        [Package {
            name: "lq-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        Toolchain::default(),
    )?;
    // With AYA_BUILD_SKIP=1 (host-only builds of the pure modules) there is no object:
    // embed an empty one, which `lqd` refuses to load with a clear error.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").context("OUT_DIR")?).join("lq");
    if !out.exists() {
        std::fs::write(&out, b"").context("write the empty eBPF object placeholder")?;
    }
    Ok(())
}
