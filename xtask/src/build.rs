//! `cargo xtask build [--release] [--target TRIPLE]`: builds `lq-user`; its build script
//! builds the eBPF object (`--locked`; nightly + bpf-linker from PATH) and `lqd` embeds
//! it.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, Result, bail};
use clap::Args;

use crate::util::{self, step};

#[derive(Args, Clone, Default)]
pub struct BuildArgs {
    /// Build with the release profile.
    #[arg(long)]
    pub release: bool,
    /// Cross-compile for this target triple (e.g. aarch64-unknown-linux-gnu).
    #[arg(long, value_name = "TRIPLE")]
    pub target: Option<String>,
}

/// Builds lq-user and returns the directory holding `lqd`.
pub fn build(args: &BuildArgs) -> Result<PathBuf> {
    let mut cmd = util::cargo_cmd(None);
    cmd.args(["build", "--locked", "-p", "lq-user"]);
    if args.release {
        cmd.arg("--release");
    }
    if let Some(triple) = &args.target {
        let linker = step("build", &format!("cross toolchain for {triple}"), || {
            ensure_cross(triple)
        })?;
        cmd.args(["--target", triple]);
        if let Some(linker) = linker {
            cmd.env(linker_env(triple), linker);
        }
    }
    step("build", "cargo build --locked -p lq-user", || {
        util::run(&mut cmd).context("building lq-user failed (see the compiler output above)")?;
        Ok(((), "built".into()))
    })?;
    Ok(out_dir(args))
}

/// `target/[TRIPLE/](debug|release)`.
pub fn out_dir(args: &BuildArgs) -> PathBuf {
    let mut dir = util::workspace_root().join("target");
    if let Some(t) = &args.target {
        dir.push(t);
    }
    dir.push(if args.release { "release" } else { "debug" });
    dir
}

/// `CARGO_TARGET_<TRIPLE>_LINKER`.
fn linker_env(triple: &str) -> String {
    format!(
        "CARGO_TARGET_{}_LINKER",
        triple.to_uppercase().replace(['-', '.'], "_")
    )
}

/// The GNU cross linker and its Debian package for `<arch>-unknown-linux-gnu*` triples.
fn gnu_cross_linker(triple: &str) -> Option<(String, String)> {
    let (arch, abi) = triple.split_once("-unknown-linux-")?;
    if !abi.starts_with("gnu") {
        return None;
    }
    let gnu = format!("{arch}-linux-{abi}");
    let deb_arch = arch.replace('_', "-");
    Some((format!("{gnu}-gcc"), format!("gcc-{deb_arch}-linux-{abi}")))
}

fn host_triple() -> Option<String> {
    let vv = util::output(Command::new("rustc").arg("-vV"))?;
    vv.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
}

/// Makes sure the Rust target and a linker for it are installed; returns the linker to set
/// (`None` for the host triple).
fn ensure_cross(triple: &str) -> Result<(Option<String>, String)> {
    if host_triple().as_deref() == Some(triple) {
        return Ok((None, "host target, nothing to do".into()));
    }
    let mut did = Vec::new();
    if ensure_rust_target(triple)? {
        did.push(format!("rustup target add {triple}"));
    }
    let Some((linker, package)) = gnu_cross_linker(triple) else {
        return Ok((
            None,
            format!(
                "no known linker for {triple}: set {} yourself",
                linker_env(triple)
            ),
        ));
    };
    if util::output(Command::new(&linker).arg("--version")).is_none() {
        if !util::is_root() {
            bail!(
                "the linker {linker} is missing: run `sudo apt-get install -y {package}` \
                 (and `rustup target add {triple}`), then rerun"
            );
        }
        let apt = |args: &[&str]| {
            let mut c = Command::new("apt-get");
            c.env("DEBIAN_FRONTEND", "noninteractive").args(args);
            util::run(&mut c)
        };
        apt(&["update", "-q"])
            .and_then(|()| apt(&["install", "-y", "-q", &package]))
            .with_context(|| {
                format!("installing {package} failed: run `apt-get update` and retry")
            })?;
        did.push(format!("installed {package}"));
    }
    let outcome = if did.is_empty() {
        "present, skipped".to_string()
    } else {
        did.join(", ")
    };
    Ok((Some(linker), outcome))
}

/// Adds the Rust standard library for `triple` if missing; returns whether it was added.
fn ensure_rust_target(triple: &str) -> Result<bool> {
    let installed = util::output(Command::new("rustup").args(["target", "list", "--installed"]))
        .context("`rustup target list --installed` failed: is rustup installed?")?;
    if installed.lines().any(|l| l.trim() == triple) {
        return Ok(false);
    }
    util::run(Command::new("rustup").args(["target", "add", triple]))
        .with_context(|| format!("`rustup target add {triple}` failed: is the triple right?"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_linker_names() {
        assert_eq!(
            gnu_cross_linker("aarch64-unknown-linux-gnu"),
            Some((
                "aarch64-linux-gnu-gcc".into(),
                "gcc-aarch64-linux-gnu".into()
            ))
        );
        assert_eq!(
            gnu_cross_linker("x86_64-unknown-linux-gnu").unwrap().1,
            "gcc-x86-64-linux-gnu"
        );
        assert_eq!(gnu_cross_linker("aarch64-unknown-linux-musl"), None);
        assert_eq!(
            linker_env("aarch64-unknown-linux-gnu"),
            "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER"
        );
    }
}
