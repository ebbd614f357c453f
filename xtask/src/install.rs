//! `cargo xtask install [--destdir DIR] [--prefix PREFIX]`: builds `lqd` (release, eBPF
//! object embedded) and installs it with its systemd unit (pointing at the installed
//! binary), a sysctl.d file, man pages, bash/zsh/fish completions, the documentation and
//! an example configuration. `--destdir` stages everything under DIR (packaging, or a dry
//! run). It installs no Debian package (`setup::Needs::Build`).

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use clap::Args;

use crate::util;

#[derive(Args)]
pub struct InstallArgs {
    /// Stage the files under this folder instead of /.
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
    /// Installation prefix.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
}

fn place(dest: &Path, rel: &Path) -> PathBuf {
    dest.join(rel.strip_prefix("/").unwrap_or(rel))
}

fn write(to: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    fs::write(to, bytes).with_context(|| format!("write {}", to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    println!("    installed {}", to.display());
    Ok(())
}

fn copy(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).with_context(|| format!("create {}", parent.display()))?;
    }
    fs::copy(from, to).with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    println!("    installed {}", to.display());
    Ok(())
}

pub fn run(args: &InstallArgs) -> Result<()> {
    let root = util::workspace_root();
    util::step("install", "build lqd (release)", || {
        let mut c = util::cargo_cmd(None);
        c.args([
            "build",
            "--locked",
            "--release",
            "-p",
            "lq-user",
            "--bin",
            "lqd",
        ]);
        util::run(&mut c).map(|()| ((), "built".to_string()))
    })?;
    let dest = args.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let sbin = args.prefix.join("sbin/lqd");
    copy(
        &root.join("target/release/lqd"),
        &place(&dest, &sbin),
        0o755,
    )?;
    let lqd = root.join("target/release/lqd");
    // The unit names the binary and the docs where this install puts them.
    let unit = fs::read_to_string(root.join("deploy/lqd@.service"))
        .context("read deploy/lqd@.service")?
        .replace("/usr/local/sbin/lqd", &sbin.display().to_string())
        .replace(
            "/usr/local/share/doc/lq",
            &args.prefix.join("share/doc/lq").display().to_string(),
        );
    write(
        &place(&dest, Path::new("/etc/systemd/system/lqd@.service")),
        unit.as_bytes(),
        0o644,
    )?;
    let sysctl = place(&dest, Path::new("/etc/sysctl.d/90-lq.conf"));
    if !sysctl.exists() {
        copy(&root.join("deploy/90-lq.conf"), &sysctl, 0o644)?;
    }
    let man = place(&dest, &args.prefix.join("share/man/man8"));
    util::run(
        util::command(lqd.to_str().context("path")?)
            .args(["man", "--out"])
            .arg(&man),
    )
    .context("writing the man pages")?;
    println!("    installed man pages in {}", man.display());
    for (shell, rel) in [
        ("bash", "share/bash-completion/completions/lqd"),
        ("zsh", "share/zsh/site-functions/_lqd"),
        ("fish", "share/fish/vendor_completions.d/lqd.fish"),
    ] {
        let script = std::process::Command::new(&lqd)
            .args(["completions", shell])
            .output()
            .with_context(|| format!("lqd completions {shell}"))?;
        anyhow::ensure!(script.status.success(), "lqd completions {shell} failed");
        write(&place(&dest, &args.prefix.join(rel)), &script.stdout, 0o644)?;
    }
    let doc = args.prefix.join("share/doc/lq");
    for f in [
        "README.md",
        "docs/operator-guide.md",
        "docs/architecture.md",
        "docs/wire.md",
    ] {
        let name = Path::new(f).file_name().context("file name")?;
        copy(&root.join(f), &place(&dest, &doc.join(name)), 0o644)?;
    }
    // Every example configuration with the docs, and the simulator's scenarios where
    // `lqd sim NAME` finds them.
    for (from, to) in [
        ("examples", args.prefix.join("share/doc/lq/examples")),
        ("scenarios", args.prefix.join("share/lq/scenarios")),
    ] {
        let mut files: Vec<_> = fs::read_dir(root.join(from))
            .with_context(|| format!("read {from}/"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for f in files {
            let name = f.file_name().context("file name")?;
            copy(&f, &place(&dest, &to.join(name)), 0o644)?;
        }
    }
    let example = place(&dest, Path::new("/etc/lq/example-leaf.toml"));
    if !example.exists() {
        copy(&root.join("examples/leaf.toml"), &example, 0o600)?;
    }
    println!("==> install: done. Next: write /etc/lq/NAME.toml (see example-leaf.toml), then");
    println!("    sysctl --system && systemctl daemon-reload && systemctl enable --now lqd@NAME");
    Ok(())
}
