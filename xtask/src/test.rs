//! `cargo xtask test [--host-only] [-- ARGS]`: every check CI runs, in order.
//!
//! Stages: `cargo fmt --check`, clippy on the user crates, `cargo doc` of the user crates
//! (warnings as errors), clippy on the eBPF crate, host unit tests, an offline build of
//! `lqd` from the lockfiles, the aarch64 build under qemu-user, privileged tests (root:
//! real kernel, network namespaces). A failing stage does not stop the next ones, so the
//! summary is complete; the exit code is non-zero if any stage failed. The last line of output is always `N passed, N failed`.
//!
//! Counting: passed/failed come from libtest's `test result:` lines. A stage that fails
//! with no failed test counted (a compile error, a clippy or fmt failure, not root) counts
//! as 1 failed in its layer.

use std::{process::Command, time::Instant};

use anyhow::Result;
use clap::Args;

use crate::util;

#[derive(Args)]
pub struct TestArgs {
    /// Skip the privileged tests (no root needed).
    #[arg(long)]
    pub host_only: bool,
    /// Extra arguments for the privileged tests' libtest (e.g. a name filter).
    #[arg(last = true, value_name = "TEST_ARGS")]
    pub args: Vec<String>,
}

/// Which summary row a stage counts in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layer {
    Lint,
    HostUnit,
    Privileged,
}

impl Layer {
    const ALL: [Layer; 3] = [Layer::Lint, Layer::HostUnit, Layer::Privileged];

    fn name(self) -> &'static str {
        match self {
            Layer::Lint => "lint (fmt, clippy)",
            Layer::HostUnit => "host unit",
            Layer::Privileged => "privileged",
        }
    }
}

struct Stage {
    name: &'static str,
    layer: Layer,
    /// `None`: the stage could not run (reason in `skip`).
    cmd: Option<Command>,
    skip: Option<String>,
    /// Work to do before the command exists (e.g. a cross build); a failure fails the
    /// stage with its reason.
    prepare: Option<fn() -> Result<Command>>,
}

#[derive(Default)]
struct Outcome {
    ok: bool,
    skipped: bool,
    passed: u64,
    failed: u64,
    secs: f64,
    note: String,
}

/// Passed and failed counts of one libtest summary line:
/// `test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; ...`.
fn parse_summary(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("test result: ")?;
    let (_, counts) = rest.split_once(". ")?;
    let mut passed = None;
    let mut failed = None;
    for part in counts.split(';') {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else {
            continue;
        };
        match what {
            "passed" => passed = n.parse().ok(),
            "failed" => failed = n.parse().ok(),
            _ => {}
        }
    }
    Some((passed?, failed?))
}

/// Runs all stages and prints the summary; returns the exit code.
pub fn test(args: &TestArgs) -> Result<i32> {
    let stages = stages(args);
    let mut results = Vec::new();
    for stage in stages {
        let out = run_stage(stage);
        results.push(out);
    }
    print_summary(&results);
    let failed = results.iter().any(|(_, _, o)| !o.ok && !o.skipped);
    Ok(if failed { 1 } else { 0 })
}

fn stages(args: &TestArgs) -> Vec<Stage> {
    let cargo = |toolchain: Option<&str>, a: &[&str]| {
        let mut c = util::cargo_cmd(toolchain);
        c.args(a);
        Some(c)
    };
    let mut list = vec![
        Stage {
            name: "cargo fmt --check",
            layer: Layer::Lint,
            cmd: cargo(None, &["fmt", "--all", "--", "--check"]),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "clippy (user crates)",
            layer: Layer::Lint,
            cmd: cargo(
                None,
                &[
                    "clippy",
                    "--workspace",
                    "--exclude",
                    "lq-ebpf",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ],
            ),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "rustdoc (links and markup)",
            layer: Layer::Lint,
            cmd: Some(rustdoc()),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "clippy (eBPF crate)",
            layer: Layer::Lint,
            cmd: Some(ebpf_clippy()),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "host unit tests",
            layer: Layer::HostUnit,
            cmd: cargo(
                None,
                &[
                    "test",
                    "--no-fail-fast",
                    "--workspace",
                    "--exclude",
                    "lq-ebpf",
                    "--exclude",
                    "lq-tests",
                ],
            ),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "offline build from the lockfiles (no network)",
            layer: Layer::HostUnit,
            cmd: Some(offline_build()),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "install stages lqd and installs no Debian package",
            layer: Layer::HostUnit,
            cmd: None,
            skip: None,
            prepare: Some(install_without_packages),
        },
        Stage {
            name: "aarch64 lqd under qemu-user",
            layer: Layer::HostUnit,
            cmd: None,
            skip: None,
            prepare: Some(cross_arch_test),
        },
    ];
    list.extend(privileged_stages(args));
    list
}

/// `cargo doc` of the user crates, private items included, with warnings as errors: a doc
/// comment that links to an item that moved or was renamed fails here, so the docs a
/// newcomer reads (`cargo doc --open`) keep matching the code.
fn rustdoc() -> Command {
    let mut c = util::cargo_cmd(None);
    c.args([
        "doc",
        "--workspace",
        "--exclude",
        "lq-ebpf",
        "--no-deps",
        "--document-private-items",
    ]);
    c.env("RUSTDOCFLAGS", "-D warnings");
    c
}

/// `lqd` built with the network off (issue 42): `--locked` and `CARGO_NET_OFFLINE=true`,
/// as root inside a new network namespace with no interface at all (`unshare --net`), into
/// its own target folder (fresh on a clean clone: every crate, the eBPF object's
/// included, compiled from the registry cache `cargo xtask setup` filled, at the versions
/// the lockfiles name, which lq-user/build.rs checks crate by crate).
fn offline_build() -> Command {
    let target = util::workspace_root().join("target").join("offline-check");
    let cargo_args = |c: &mut Command| {
        c.args([
            "build",
            "--locked",
            "-p",
            "lq-user",
            "--bin",
            "lqd",
            "--target-dir",
        ])
        .arg(&target)
        .env("CARGO_NET_OFFLINE", "true");
    };
    if util::is_root() {
        let mut c = util::command("unshare");
        c.args(["--net", "cargo"]);
        cargo_args(&mut c);
        c
    } else {
        let mut c = util::cargo_cmd(None);
        cargo_args(&mut c);
        c
    }
}

/// `cargo xtask install --destdir D --prefix /usr` with `apt-get`, `apt` and `dpkg-query`
/// shadowed by stubs that fail and leave a mark (issue 43): the install (its setup, its
/// release build) must succeed without them, and the staged unit must point at the staged
/// binary. The returned command checks the staged files.
fn install_without_packages() -> Result<Command> {
    use anyhow::Context as _;
    let scratch = util::workspace_root().join("target").join("install-check");
    let _ = std::fs::remove_dir_all(&scratch);
    let stubs = scratch.join("stubs");
    let dest = scratch.join("dest");
    let mark = scratch.join("package-manager-called");
    std::fs::create_dir_all(&stubs)?;
    for tool in ["apt-get", "apt", "dpkg-query"] {
        use std::os::unix::fs::PermissionsExt as _;
        let path = stubs.join(tool);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"{tool} $*\" >> '{}'\nexit 1\n",
                mark.display()
            ),
        )?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    let path = std::env::join_paths(std::iter::once(stubs.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let mut install = util::cargo_cmd(None);
    install
        .args(["xtask", "install", "--prefix", "/usr", "--destdir"])
        .arg(&dest)
        .env("PATH", path);
    util::run(&mut install).context("cargo xtask install with the package manager stubbed")?;
    if let Ok(calls) = std::fs::read_to_string(&mark) {
        anyhow::bail!("the install ran the package manager: {calls}");
    }
    let mut check = util::command("sh");
    check.arg("-c").arg(format!(
        "set -e; d='{}'; \
         test -x \"$d/usr/sbin/lqd\"; \
         grep -qx 'ExecStart=/usr/sbin/lqd --log-format json run --config /etc/lq/%i.toml --instance %i' \"$d/etc/systemd/system/lqd@.service\"; \
         grep -qx 'ExecReload=/usr/sbin/lqd reload --instance %i' \"$d/etc/systemd/system/lqd@.service\"; \
         ! grep -q /usr/local \"$d/etc/systemd/system/lqd@.service\"; \
         grep -q '^net.ipv4.fib_multipath_hash_policy = 1' \"$d/etc/sysctl.d/90-lq.conf\"; \
         for p in lqd lqd-run lqd-show lqd-reload lqd-cleanup lqd-check-config; do test -s \"$d/usr/share/man/man8/$p.8\"; done; \
         grep -q '^.TH lqd-reload 8' \"$d/usr/share/man/man8/lqd-reload.8\"; \
         bash -n \"$d/usr/share/bash-completion/completions/lqd\"; \
         grep -q cleanup \"$d/usr/share/bash-completion/completions/lqd\"; \
         test -s \"$d/usr/share/zsh/site-functions/_lqd\"; \
         test -s \"$d/usr/share/fish/vendor_completions.d/lqd.fish\"; \
         test -s \"$d/usr/share/doc/lq/examples/spine.toml\"; \
         cd /; \"$d/usr/sbin/lqd\" sim appendix-b --until-ms 50 | head -1 | grep -q t-ms; \
         echo 'staged install: unit, sysctl.d, man pages and completions as expected'",
        dest.display()
    ));
    Ok(check)
}

/// The Arm build (SmartNIC cores) is run, not only built: `lqd` for aarch64 under qemu-user
/// must print what the host build prints (lq-user/tests/cross_arch.rs).
fn cross_arch_test() -> Result<Command> {
    const TRIPLE: &str = "aarch64-unknown-linux-gnu";
    let dir = crate::build::build(&crate::build::BuildArgs {
        release: false,
        target: Some(TRIPLE.into()),
    })?;
    let mut c = util::cargo_cmd(None);
    c.args([
        "test",
        "-p",
        "lq-user",
        "--test",
        "cross_arch",
        "--",
        "--ignored",
    ])
    .env("LQ_CROSS_LQD", dir.join("lqd"))
    // qemu-user from setup's Debian packages; the Arm loader and libc come with the cross
    // linker's package (libc6-arm64-cross).
    .env("LQ_CROSS_RUNNER", "qemu-aarch64 -L /usr/aarch64-linux-gnu");
    Ok(c)
}

/// clippy for `lq-ebpf` on the BPF target. aya-ebpf's build script derives
/// `bpf_target_arch` from the host unless `AYA_BPF_TARGET_ARCH` is set; we set it to the
/// host's architecture explicitly, like lq-user/build.rs does for the real build.
fn ebpf_clippy() -> Command {
    let mut c = util::cargo_cmd(Some("nightly"));
    c.args([
        "clippy",
        "-p",
        "lq-ebpf",
        "--target",
        "bpfel-unknown-none",
        "-Z",
        "build-std=core",
        "--",
        "-D",
        "warnings",
    ])
    .env("AYA_BPF_TARGET_ARCH", std::env::consts::ARCH);
    c
}

fn privileged_stages(args: &TestArgs) -> Vec<Stage> {
    let name = "privileged tests";
    let layer = Layer::Privileged;
    let skip = if args.host_only {
        Some("--host-only".to_string())
    } else if !util::is_root() {
        Some(
            "needs root (real kernel, network namespaces): rerun as root, \
             e.g. `sudo -E cargo xtask test`, or pass --host-only"
                .to_string(),
        )
    } else {
        None
    };
    if let Some(skip) = skip {
        return vec![Stage {
            name,
            layer,
            cmd: None,
            skip: Some(skip),
            prepare: None,
        }];
    }
    // The lq-tests crate, plus the real-kernel tests that live beside the code they test
    // in lq-user and are `#[ignore]`d there because they need root.
    let mut tests = util::cargo_cmd(None);
    tests
        .args([
            "test",
            "--no-fail-fast",
            "-p",
            "lq-tests",
            "--",
            "--test-threads=1",
        ])
        .args(&args.args);
    let mut ignored = util::cargo_cmd(None);
    ignored
        .args([
            "test",
            "--no-fail-fast",
            "-p",
            "lq-user",
            "--lib",
            "--",
            "--ignored",
            "--test-threads=1",
        ])
        .args(&args.args);
    vec![
        Stage {
            name,
            layer,
            cmd: Some(tests),
            skip: None,
            prepare: None,
        },
        Stage {
            name: "privileged tests in lq-user (#[ignore]d: need root)",
            layer,
            cmd: Some(ignored),
            skip: None,
            prepare: None,
        },
    ]
}

fn run_stage(stage: Stage) -> (&'static str, Layer, Outcome) {
    let Stage {
        name,
        layer,
        cmd,
        skip,
        prepare,
    } = stage;
    util::break_line();
    println!("==> test: {name}");
    let start = Instant::now();
    let prepared = prepare.map(|f| f());
    let (cmd, skip) = match prepared {
        Some(Ok(c)) => (Some(c), skip),
        Some(Err(e)) => (None, Some(format!("{e:#}"))),
        None => (cmd, skip),
    };
    let mut out = match (cmd, skip) {
        (Some(mut cmd), _) => run_counted(&mut cmd),
        (None, Some(reason)) if reason == "--host-only" => Outcome {
            skipped: true,
            note: "skipped (--host-only)".into(),
            ..Outcome::default()
        },
        (None, reason) => Outcome {
            failed: 1,
            note: reason.unwrap_or_default(),
            ..Outcome::default()
        },
    };
    out.secs = start.elapsed().as_secs_f64();
    let verdict = if out.skipped {
        "skipped"
    } else if out.ok {
        "ok"
    } else {
        "FAILED"
    };
    println!("==> test: {name} ... {verdict} in {:.1} s", out.secs);
    if !out.note.is_empty() && !out.skipped {
        println!("    {}", out.note);
    }
    (name, layer, out)
}

/// Runs a stage's command, sums its libtest summaries, and counts a failure without a
/// failed test as 1 failed.
fn run_counted(cmd: &mut Command) -> Outcome {
    let mut passed = 0;
    let mut failed = 0;
    let status = util::run_streaming(cmd, util::Pipe::Stdout, |line| {
        if let Some((p, f)) = parse_summary(line) {
            passed += p;
            failed += f;
        }
    });
    let (ok, note) = match status {
        Ok(st) if st.success() => (true, String::new()),
        Ok(st) => (false, format!("{} exited with {st}", util::describe(cmd))),
        Err(e) => (false, format!("{e:#}")),
    };
    if !ok && failed == 0 {
        failed = 1;
    }
    Outcome {
        ok,
        passed,
        failed,
        note,
        ..Outcome::default()
    }
}

fn print_summary(results: &[(&'static str, Layer, Outcome)]) {
    // One column as wide as the longest stage name, so the table stays aligned.
    let w = results
        .iter()
        .map(|(name, _, _)| name.len())
        .chain(Layer::ALL.iter().map(|l| l.name().len()))
        .max()
        .unwrap_or(24);
    println!();
    println!("{:<w$} {:>8} {:>9}", "stage", "result", "time");
    for (name, _, o) in results {
        let r = if o.skipped {
            "skipped"
        } else if o.ok {
            "ok"
        } else {
            "FAILED"
        };
        println!("{name:<w$} {r:>8} {:>7.1} s", o.secs);
    }
    println!();
    println!("{:<w$} {:>8} {:>8}", "layer", "passed", "failed");
    let (mut tp, mut tf) = (0, 0);
    for layer in Layer::ALL {
        let rows = results.iter().filter(|(_, l, _)| *l == layer);
        let (p, f) = rows.fold((0, 0), |(p, f), (_, _, o)| (p + o.passed, f + o.failed));
        println!("{:<w$} {p:>8} {f:>8}", layer.name());
        tp += p;
        tf += f;
    }
    println!("{tp} passed, {tf} failed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_parsed() {
        let line = "test result: ok. 12 passed; 0 failed; 0 ignored; 0 measured; \
                    0 filtered out; finished in 0.01s";
        assert_eq!(parse_summary(line), Some((12, 0)));
        let line = "test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured; \
                    0 filtered out; finished in 1.20s";
        assert_eq!(parse_summary(line), Some((3, 2)));
        assert_eq!(parse_summary("running 3 tests"), None);
        assert_eq!(parse_summary("test foo ... ok"), None);
    }
}
