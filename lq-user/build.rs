use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

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
    )
}
