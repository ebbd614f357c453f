//! `cargo xtask setup`: everything a fresh Debian machine needs to build and test `lq`.
//! Idempotent; every other subcommand runs what it needs of it first: `build`, `install`
//! and `run` only the build's part ([`Needs::Build`]: no Debian package, so that a router
//! that runs its own FRR gets nothing installed beside lqd), `test`, `demo`, `bench` and
//! `fuzz` all of it ([`Needs::Everything`]).
//!
//! * the nightly toolchain with `rust-src` and `clippy` (the eBPF build), and `clippy` and
//!   `rustfmt` for the default toolchain;
//! * bpf-linker 0.13.0 built against the nightly's own LLVM, cached in
//!   `${XDG_CACHE_HOME:-$HOME/.cache}/lq/bpf-linker-llvm<major>` and put first on PATH of
//!   every child process;
//! * the Debian packages the tests use;
//! * every crate the build compiles, fetched into cargo's registry cache at the versions
//!   Cargo.lock names (the workspace's crates for every platform, and `-Z build-std`'s for
//!   the BPF target), so that after setup the whole build, eBPF object included, runs with
//!   the network off (`CARGO_NET_OFFLINE=true`);
//! * bpffs mounted on /sys/fs/bpf.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};

use crate::util::{self, step};

/// bpf-linker version built by setup.
const BPF_LINKER_VERSION: &str = "0.13.0";

/// Debian packages the tests need.
const DEBIAN_PACKAGES: &[&str] = &[
    "tshark",
    "pmacct",
    "libyang2-tools",
    "bpftool",
    "python3-scapy",
    "iperf3",
    "iproute2",
    // An independent JSON parser for the tests of every `--json` output.
    "jq",
    "ethtool",
    "python3-prometheus-client",
    // Installs pygnmi and its grpcio (PYTHON_PACKAGES).
    "python3-pip",
    // Runs the aarch64 build of lqd in the tests (SmartNIC Arm cores).
    "qemu-user",
    // zebra + bgpd per namespace: the slow-plane test with real BGP (tests/tests/bgp_frr.rs).
    "frr",
];

/// tshark's debconf question about non-root capture, answered before installing.
const WIRESHARK_PRESEED: &str = "wireshark-common wireshark-common/install-setuid boolean false\n";

/// What a subcommand needs set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Building lqd: the toolchains, bpf-linker and the locked crates. No Debian package.
    Build,
    /// Running lqd: the build's needs and bpffs.
    Run,
    /// Tests, demo, benchmarks, fuzzing: everything, the Debian packages included.
    Everything,
}

/// Runs every setup step and prints the total time.
pub fn setup() -> Result<()> {
    setup_for(Needs::Everything)
}

/// Runs the setup steps `needs` asks for.
pub fn setup_for(needs: Needs) -> Result<()> {
    let start = Instant::now();
    step("setup", "nightly toolchain", ensure_nightly)?;
    step("setup", "toolchain components", ensure_components)?;
    let major = step("setup", "LLVM version of nightly", nightly_llvm_major)?;
    let dir = bpf_linker_dir(major)?;
    step("setup", &format!("bpf-linker (llvm {major})"), || {
        ensure_bpf_linker(&dir, major)
    })?;
    util::prepend_to_child_path(vec![dir.join("bin")]);
    if needs == Needs::Everything {
        step("setup", "Debian packages", ensure_debian_packages)?;
        step("setup", "Python packages (PyPI)", ensure_python_packages)?;
    }
    step(
        "setup",
        "crates of Cargo.lock (offline builds)",
        prefetch_crates,
    )?;
    if needs != Needs::Build {
        step("setup", "bpffs on /sys/fs/bpf", ensure_bpffs)?;
    }
    println!("==> setup: done in {}", util::secs(start.elapsed()));
    Ok(())
}

/// `cargo fetch --locked` for the host toolchain's build and the nightly's eBPF build
/// (`-Z build-std=core` for bpfel-unknown-none): downloads what the registry cache lacks,
/// never changes Cargo.lock. Offline (`CARGO_NET_OFFLINE=true`) it only checks that the
/// cache has everything, with cargo's own error otherwise.
fn prefetch_crates() -> Result<((), String)> {
    let root = util::workspace_root();
    let offline = std::env::var("CARGO_NET_OFFLINE").is_ok_and(|v| v == "true" || v == "1");
    let mut host = util::cargo_cmd(None);
    // The platforms lq is built for (the host, and aarch64 for SmartNIC Arm cores); all
    // of Cargo.lock's would pull crates of platforms nobody builds (Android, Windows).
    host.current_dir(root)
        .args(["fetch", "--locked", "--quiet"]);
    for t in [host_triple().as_str(), "aarch64-unknown-linux-gnu"] {
        host.args(["--target", t]);
    }
    util::run(&mut host).context(
        "`cargo fetch --locked` failed: Cargo.lock must match the manifests (commit the lockfile `cargo build` writes), and crates.io must be reachable unless every crate is cached",
    )?;
    let mut ebpf = Command::new("rustup");
    ebpf.current_dir(root).args([
        "run",
        "nightly",
        "cargo",
        "fetch",
        "--locked",
        "--quiet",
        "-Z",
        "build-std=core",
        "--target",
        "bpfel-unknown-none",
    ]);
    util::run(&mut ebpf)
        .context("fetching the eBPF build's crates (nightly, -Z build-std) failed")?;
    Ok((
        (),
        if offline {
            "offline: the registry cache has every crate".into()
        } else {
            "cached at the locked versions".into()
        },
    ))
}

/// The host's target triple (`rustc -vV`), x86_64 Linux when it cannot be read.
fn host_triple() -> String {
    util::output(Command::new("rustc").arg("-vV"))
        .and_then(|o| {
            o.lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        })
        .unwrap_or_else(|| "x86_64-unknown-linux-gnu".into())
}

fn ensure_nightly() -> Result<((), String)> {
    let list = util::output(Command::new("rustup").args(["toolchain", "list"]))
        .context("`rustup toolchain list` failed: install rustup from https://rustup.rs")?;
    if list.lines().any(|l| l.starts_with("nightly-")) {
        return Ok(((), "present, skipped".into()));
    }
    util::run(Command::new("rustup").args([
        "toolchain",
        "install",
        "nightly",
        "--profile",
        "minimal",
    ]))
    .context(
        "installing the nightly toolchain failed: check network access to static.rust-lang.org",
    )?;
    Ok(((), "installed".into()))
}

/// Components per toolchain (`None`: the default toolchain).
const COMPONENTS: &[(Option<&str>, &[&str])] = &[
    (Some("nightly"), &["rust-src", "clippy"]),
    (None, &["clippy", "rustfmt"]),
];

fn ensure_components() -> Result<((), String)> {
    let mut added = Vec::new();
    for (toolchain, wanted) in COMPONENTS {
        let missing = missing_components(*toolchain, wanted)?;
        if missing.is_empty() {
            continue;
        }
        let mut cmd = Command::new("rustup");
        cmd.args(["component", "add"]).args(&missing);
        if let Some(t) = toolchain {
            cmd.args(["--toolchain", t]);
        }
        util::run(&mut cmd).context("`rustup component add` failed: check network access")?;
        added.extend(missing);
    }
    Ok(if added.is_empty() {
        ((), "present, skipped".into())
    } else {
        ((), format!("added {}", added.join(", ")))
    })
}

fn missing_components(toolchain: Option<&str>, wanted: &[&str]) -> Result<Vec<String>> {
    let mut cmd = Command::new("rustup");
    cmd.args(["component", "list", "--installed"]);
    if let Some(t) = toolchain {
        cmd.args(["--toolchain", t]);
    }
    let installed = util::output(&mut cmd)
        .with_context(|| format!("`{}` failed: is rustup installed?", util::describe(&cmd)))?;
    // Lines look like `rust-src` or `clippy-x86_64-unknown-linux-gnu`.
    let has = |c: &str| {
        installed
            .lines()
            .any(|l| l == c || l.strip_prefix(c).is_some_and(|r| r.starts_with('-')))
    };
    Ok(wanted
        .iter()
        .filter(|c| !has(c))
        .map(|c| c.to_string())
        .collect())
}

/// The LLVM major version of the nightly compiler (`LLVM version: 22.1.4` -> 22).
fn nightly_llvm_major() -> Result<(u32, String)> {
    let vv = util::output(Command::new("rustc").args(["+nightly", "-vV"]))
        .context("`rustc +nightly -vV` failed: run `rustup toolchain install nightly`")?;
    let major = parse_llvm_major(&vv)
        .context("`rustc +nightly -vV` printed no `LLVM version: N.x.y` line")?;
    Ok((major, format!("LLVM {major}")))
}

fn parse_llvm_major(vv: &str) -> Option<u32> {
    let version = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version:"))?
        .trim();
    version.split('.').next()?.parse().ok()
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/lq/bpf-linker-llvm<major>`.
fn bpf_linker_dir(major: u32) -> Result<PathBuf> {
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    Ok(cache.join("lq").join(format!("bpf-linker-llvm{major}")))
}

fn bpf_linker_runs(bin: &Path) -> Option<String> {
    util::output(Command::new(bin).arg("--version")).map(|v| v.trim().to_string())
}

fn ensure_bpf_linker(dir: &Path, major: u32) -> Result<((), String)> {
    let bin = dir.join("bin").join("bpf-linker");
    if let Some(v) = bpf_linker_runs(&bin) {
        return Ok(((), format!("{v} present, skipped")));
    }
    let sysroot = nightly_sysroot()?;
    link_libllvm(dir, &sysroot, major)?;
    install_bpf_linker(dir, &sysroot, major)?;
    let v = bpf_linker_runs(&bin).with_context(|| {
        format!(
            "{} was built but does not run: try `{} --version` to see why, then delete {} and rerun",
            bin.display(),
            bin.display(),
            dir.display()
        )
    })?;
    Ok(((), format!("{v} built")))
}

fn nightly_sysroot() -> Result<PathBuf> {
    let out = util::output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .context("`rustc +nightly --print sysroot` failed: is the nightly toolchain installed?")?;
    Ok(PathBuf::from(out.trim()))
}

/// `<dir>/llvm-prefix/lib/libLLVM.so` -> the nightly sysroot's `lib/libLLVM.so.<major>.*`,
/// so that bpf-linker links against the very LLVM rustc uses.
fn link_libllvm(dir: &Path, sysroot: &Path, major: u32) -> Result<()> {
    let lib = sysroot.join("lib");
    let prefix = format!("libLLVM.so.{major}.");
    let found = std::fs::read_dir(&lib)
        .with_context(|| format!("reading {}", lib.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .with_context(|| {
            format!(
                "no {prefix}* in {}: the nightly toolchain ships no shared LLVM; \
                 reinstall it with `rustup toolchain install nightly --force`",
                lib.display()
            )
        })?;
    let link_dir = dir.join("llvm-prefix").join("lib");
    std::fs::create_dir_all(&link_dir)
        .with_context(|| format!("creating {}", link_dir.display()))?;
    let link = link_dir.join("libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&found, &link)
        .with_context(|| format!("linking {} -> {}", link.display(), found.display()))
}

fn install_bpf_linker(dir: &Path, sysroot: &Path, major: u32) -> Result<()> {
    let install = |locked: bool| {
        let mut cmd = util::cargo_cmd(None);
        cmd.args(["install", &format!("bpf-linker@{BPF_LINKER_VERSION}")]);
        if locked {
            cmd.arg("--locked");
        }
        cmd.args([
            "--no-default-features",
            "--features",
            &format!("llvm-{major}"),
        ])
        .arg("--root")
        .arg(dir)
        .env("LLVM_PREFIX", dir.join("llvm-prefix"))
        .env(
            "RUSTFLAGS",
            format!("-C link-arg=-Wl,-rpath,{}", sysroot.join("lib").display()),
        );
        util::status(&mut cmd)
    };
    if install(true)?.success() {
        return Ok(());
    }
    println!("    `cargo install --locked` failed; retrying without --locked");
    if install(false)?.success() {
        return Ok(());
    }
    bail!(
        "building bpf-linker {BPF_LINKER_VERSION} against LLVM {major} failed (see above): \
         bpf-linker needs a C++ compiler (`apt-get install g++`); delete {} and rerun",
        dir.display()
    )
}

fn dpkg_installed(pkg: &str) -> bool {
    util::output(Command::new("dpkg-query").args(["-W", "-f=${Status}", pkg]))
        .is_some_and(|s| s.trim() == "install ok installed")
}

/// Python packages from PyPI the tests need, at the versions tested, for Debian's
/// python3 (the one scapy is installed for): pygnmi, the gNMI client of the northbound's
/// tests (issue 40), with the grpcio and protobuf it was tested with.
const PYTHON_PACKAGES: &[(&str, &str)] = &[
    ("pygnmi", "0.8.15"),
    ("grpcio", "1.85.3"),
    ("protobuf", "7.36.2"),
];

fn python_package_version(name: &str) -> Option<String> {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-c",
            &format!("import importlib.metadata as m; print(m.version({name:?}))"),
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn ensure_python_packages() -> Result<((), String)> {
    let missing: Vec<String> = PYTHON_PACKAGES
        .iter()
        .filter(|(n, v)| python_package_version(n).as_deref() != Some(*v))
        .map(|(n, v)| format!("{n}=={v}"))
        .collect();
    if missing.is_empty() {
        return Ok(((), format!("{} present, skipped", PYTHON_PACKAGES.len())));
    }
    let pip = format!(
        "/usr/bin/python3 -m pip install --break-system-packages --no-input {}",
        missing.join(" ")
    );
    if !util::is_root() {
        bail!(
            "missing Python packages {}: run as root\n    sudo {pip}",
            missing.join(", ")
        );
    }
    util::run(
        Command::new("/usr/bin/python3")
            .args([
                "-m",
                "pip",
                "install",
                "--break-system-packages",
                "--no-input",
            ])
            .args(&missing),
    )
    .with_context(|| {
        format!(
            "installing {} failed: try `{pip}` by hand (needs PyPI)",
            missing.join(" ")
        )
    })?;
    Ok(((), format!("installed {}", missing.join(" "))))
}

fn ensure_debian_packages() -> Result<((), String)> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(((), format!("{} present, skipped", DEBIAN_PACKAGES.len())));
    }
    let apt = format!(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {}",
        missing.join(" ")
    );
    if !util::is_root() {
        bail!(
            "missing Debian packages {}: run as root\n    sudo apt-get update && sudo {apt}",
            missing.join(", ")
        );
    }
    if missing.contains(&"tshark") {
        preseed_wireshark()?;
    }
    util::run(apt_get().arg("update"))
        .context("`apt-get update` failed: check the Debian mirror")?;
    util::run(
        apt_get()
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing),
    )
    .with_context(|| {
        format!(
            "installing {} failed: try `{apt}` by hand",
            missing.join(" ")
        )
    })?;
    Ok(((), format!("installed {}", missing.join(" "))))
}

fn apt_get() -> Command {
    let mut cmd = Command::new("apt-get");
    cmd.env("DEBIAN_FRONTEND", "noninteractive");
    cmd
}

fn preseed_wireshark() -> Result<()> {
    let mut cmd = Command::new("debconf-set-selections");
    util::echo(&cmd);
    let mut child = cmd
        .stdin(Stdio::piped())
        .spawn()
        .context("could not start debconf-set-selections (package debconf)")?;
    child
        .stdin
        .take()
        .context("stdin of debconf-set-selections")?
        .write_all(WIRESHARK_PRESEED.as_bytes())?;
    let st = child.wait()?;
    if !st.success() {
        bail!("debconf-set-selections failed ({st})");
    }
    Ok(())
}

fn bpffs_mounted() -> Result<bool> {
    let mounts = std::fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    Ok(mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(1) == Some(&"/sys/fs/bpf") && f.get(2) == Some(&"bpf")
    }))
}

fn ensure_bpffs() -> Result<((), String)> {
    if bpffs_mounted()? {
        return Ok(((), "mounted, skipped".into()));
    }
    if !util::is_root() {
        return Ok((
            (),
            "not mounted; the privileged tests need it: `sudo mount -t bpf bpf /sys/fs/bpf`".into(),
        ));
    }
    std::fs::create_dir_all("/sys/fs/bpf").context("creating /sys/fs/bpf")?;
    util::run(Command::new("mount").args(["-t", "bpf", "bpf", "/sys/fs/bpf"]))
        .context("mounting bpffs failed: is this a container without CAP_SYS_ADMIN?")?;
    Ok(((), "mounted".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_major_is_read_from_rustc_vv() {
        let vv = "rustc 1.97.0-nightly\nhost: x86_64-unknown-linux-gnu\nLLVM version: 22.1.4\n";
        assert_eq!(parse_llvm_major(vv), Some(22));
        assert_eq!(parse_llvm_major("rustc 1.0\n"), None);
    }
}
