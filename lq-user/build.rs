//! Builds the eBPF object (`lq-ebpf`, binary `lq`) with the nightly toolchain and
//! bpf-linker, into OUT_DIR, where `include_bytes_aligned!` embeds it in `lqd`.
//!
//! What aya-build's `build_ebpf` does (its command line, flags and target folder), with
//! two things it cannot be told (issue 42): the build is `--locked`, so it compiles the
//! crate versions the workspace's committed Cargo.lock names and never resolves afresh
//! (a new upstream release cannot change or break it, and it needs no network: with
//! `CARGO_NET_OFFLINE=true` it runs from the registry cache `cargo xtask setup` fills);
//! and every crate it compiles is checked against a committed lockfile: ours for registry
//! crates, the toolchain's `library/Cargo.lock` for `-Z build-std`'s (core and
//! compiler_builtins come from the toolchain's rust-src, pinned by the toolchain). A crate
//! that is in neither fails the build, naming it. The list goes to OUT_DIR/ebpf-crates.txt.

use std::{
    collections::BTreeSet,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, anyhow, bail};
use cargo_metadata::{Message, PackageId};
// A build-dependency only so that cargo reruns this script when lq-ebpf changes.
use lq_ebpf as _;

/// The gNMI service and messages (issue 40) from the vendored protos in `proto/`
/// (openconfig/gnmi, Apache-2.0, `proto/github.com/openconfig/gnmi/LICENSE`), parsed by
/// protox: no protoc on the build machine.
fn gnmi_protos() -> anyhow::Result<()> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?)
        .join("proto");
    let gnmi = root.join("github.com/openconfig/gnmi/proto/gnmi/gnmi.proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let fds = protox::compile([&gnmi], [&root]).context("parsing the gNMI protos")?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_fds(fds)
        .context("generating the gNMI service")?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    gnmi_protos()?;
    println!("cargo:rerun-if-env-changed=AYA_BUILD_SKIP");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").context("OUT_DIR")?);
    let object = out_dir.join("lq");
    if std::env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
        // Host-only builds of the pure modules: an empty object, which `lqd` refuses to
        // load with a clear error.
        println!("cargo:warning=AYA_BUILD_SKIP is set; lqd is built without its eBPF object");
        if !object.exists() {
            std::fs::write(&object, b"").context("write the empty eBPF object placeholder")?;
        }
        return Ok(());
    }
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?);
    let workspace = manifest
        .parent()
        .ok_or_else(|| anyhow!("lq-user has no parent directory"))?
        .to_path_buf();
    let ebpf_dir = workspace.join("lq-ebpf");
    println!("cargo:rerun-if-changed={}", ebpf_dir.display());
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("lq-common").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );

    let endian = std::env::var("CARGO_CFG_TARGET_ENDIAN").context("CARGO_CFG_TARGET_ENDIAN")?;
    let target = match endian.as_str() {
        "little" => "bpfel-unknown-none",
        "big" => "bpfeb-unknown-none",
        e => bail!("unsupported endianness {e}"),
    };
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH")?;
    let arch = if arch.starts_with("riscv64") {
        "riscv64".to_owned()
    } else {
        arch
    };

    let mut cmd = Command::new("rustup");
    cmd.args(["run", "nightly", "cargo", "build"])
        .args(["--package", "lq-ebpf", "--bins", "--release", "--locked"])
        .args(["--message-format=json", "--target", target])
        .args(["-Z", "build-std=core"])
        // Separate from OUT_DIR's artifacts (cargo would otherwise lock itself, and the
        // object copied to OUT_DIR/lq would collide with a folder of that name).
        .arg("--target-dir")
        .arg(out_dir.join("ebpf-target"))
        .current_dir(&workspace)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf"),
        )
        // The outer build's compiler settings are for the host toolchain.
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTC_WRAPPER")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("run `rustup run nightly cargo build` for lq-ebpf (is rustup installed? `cargo xtask setup`)")?;
    let stderr = child.stderr.take().ok_or_else(|| anyhow!("no stderr"))?;
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        // Cargo's progress lines: shown only when the build fails (in its error); the
        // compiler's diagnostics come as JSON messages and are shown as warnings.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let mut compiled: BTreeSet<PackageId> = BTreeSet::new();
    let mut executable = None;
    for message in Message::parse_stream(BufReader::new(stdout)) {
        match message.context("the eBPF build printed invalid JSON")? {
            Message::CompilerArtifact(a) => {
                if a.target.name == "lq" && a.executable.is_some() {
                    executable = a.executable.map(|e| e.into_std_path_buf());
                }
                compiled.insert(a.package_id);
            }
            Message::CompilerMessage(m) => {
                for line in m.message.rendered.unwrap_or_default().lines() {
                    println!("cargo:warning={line}");
                }
            }
            _ => {}
        }
    }
    let status = child.wait().context("wait for the eBPF build")?;
    let stderr = stderr.join().unwrap_or_default();
    if !status.success() {
        let hint = if stderr.contains("--locked") || stderr.contains("lock file") {
            " (Cargo.lock is out of date: run `cargo update -w` or `cargo build` online once, and commit Cargo.lock)"
        } else if stderr.contains("offline") || stderr.contains("failed to download") {
            " (a crate is missing from the registry cache: run `cargo xtask setup` with network access first)"
        } else {
            ""
        };
        bail!("the eBPF build (lq-ebpf) failed: {status}{hint}\n{stderr}");
    }
    let executable = executable.ok_or_else(|| anyhow!("the eBPF build produced no `lq` object"))?;
    std::fs::copy(&executable, &object)
        .with_context(|| format!("copy {} to {}", executable.display(), object.display()))?;

    let lines = check_locked(&compiled, &workspace)?;
    std::fs::write(out_dir.join("ebpf-crates.txt"), lines.join("\n") + "\n")
        .context("write ebpf-crates.txt")?;
    Ok(())
}

/// Checks that every compiled crate is one a committed lockfile names: a registry crate
/// at the version of the workspace's Cargo.lock, a workspace crate, or a crate of the
/// toolchain's rust-src named in its `library/Cargo.lock`. Returns one line per crate:
/// `name version source`.
fn check_locked(compiled: &BTreeSet<PackageId>, workspace: &Path) -> anyhow::Result<Vec<String>> {
    let ours = lock_entries(&workspace.join("Cargo.lock"))?;
    let sysroot = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .output()
        .context("rustc --print sysroot")?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    let library = sysroot.join("lib/rustlib/src/rust/library");
    let std_lock = lock_entries(&library.join("Cargo.lock"))?;
    let mut lines = Vec::new();
    let mut unlocked = Vec::new();
    for id in compiled {
        // `registry+https://...#name@1.2.3`, `path+file:///...#name@0.1.0` or
        // `path+file:///.../name#0.1.0`.
        let (source, rest) = id.repr.split_once('#').unwrap_or(("", &id.repr));
        let (name, version) = match rest.split_once('@') {
            Some((n, v)) => (n.to_owned(), v.to_owned()),
            None => (
                source.rsplit('/').next().unwrap_or_default().to_owned(),
                rest.to_owned(),
            ),
        };
        let path = source.strip_prefix("path+file://").map(PathBuf::from);
        let which = if let Some(p) = &path {
            if p.starts_with(workspace) {
                ours.contains(&(name.clone(), version.clone()))
                    .then_some("workspace")
            } else if p.starts_with(&library) {
                std_lock
                    .contains(&(name.clone(), version.clone()))
                    .then_some("toolchain library/Cargo.lock")
            } else {
                None
            }
        } else if source.starts_with("registry+") {
            ours.contains(&(name.clone(), version.clone()))
                .then_some("Cargo.lock")
        } else {
            None
        };
        match which {
            Some(w) => lines.push(format!("{name} {version} {w}")),
            None => unlocked.push(format!("{name} {version} ({source})")),
        }
    }
    if !unlocked.is_empty() {
        bail!(
            "the eBPF build compiled crates no committed lockfile names: {}",
            unlocked.join(", ")
        );
    }
    Ok(lines)
}

/// The (name, version) pairs of a Cargo.lock.
fn lock_entries(path: &Path) -> anyhow::Result<BTreeSet<(String, String)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let lock: toml::Value = text
        .parse()
        .with_context(|| format!("parse {}", path.display()))?;
    Ok(lock
        .get("package")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some((
                p.get("name")?.as_str()?.to_owned(),
                p.get("version")?.as_str()?.to_owned(),
            ))
        })
        .collect())
}
