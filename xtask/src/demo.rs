//! `cargo xtask demo`: the fabric demo of issue 7. Builds `lqd` and the `demo` program of
//! lq-tests (release) and runs the demo as root: a 3-stage CLOS of 4 spines and 4 leaves with
//! a host behind each leaf, in network namespaces, lqd on every node, a job and a dynamic
//! load under ECMP, static weights and lq. Results: `target/demo/report.json` and
//! `target/demo/plot.svg`. `--draws N` repeats every scenario over N hash draws (pinned
//! `fib_multipath_hash_seed` per draw) and reports the median, minimum and maximum of every
//! metric (issue 12). `--bgp` runs it with FRR on every router (issue 16).
//!
//! The fabric builder lives in `tests/src/fabric.rs` (shared with the fabric tests), the
//! demo itself in `tests/src/bin/demo/`: both need aya and lq-user, which xtask does not
//! build. Ctrl-C reaches the demo, which removes its namespaces and processes; this process
//! waits for it.

use std::{
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
};

use anyhow::{Context as _, Result, bail};
use clap::Args;

use crate::{
    build::{self, BuildArgs},
    util,
};

#[derive(Args)]
pub struct DemoArgs {
    /// The short version (CI): 32 flows of 2 MiB, 14 s of dynamic load.
    #[arg(long)]
    pub quick: bool,
    /// Output folder (default target/demo).
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Hash draws: every scenario runs once per draw, draw k with
    /// `net.ipv4.fib_multipath_hash_seed = SEED_BASE + k` in every router namespace; the
    /// report gives each metric's median, min and max over the draws.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub draws: u32,
    /// The first draw's hash seed (1 or more; 0 is the kernel's random seed).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub seed_base: u32,
    /// The leaves' `weight-function`: lqd's default (`seed`: seed 003 sections 6.3/6.4
    /// with the slow plane's capacity, 4.1) when not given; `integral` runs the opt-in
    /// function built for elastic load (docs/weights.md). The demo prints every setting
    /// that differs from lqd's defaults.
    #[arg(long, value_name = "NAME")]
    pub weight_function: Option<String>,
    /// The leaves' `[nexthop-group] replace`: lqd's default (`forwarding-change`: a computed
    /// weight change is written when it moves a bucket, issue 41) when not given;
    /// `every-step` writes every change, for comparison.
    #[arg(long, value_name = "MODE")]
    pub replace: Option<String>,
    /// The leaves prune a path whose spine reports loss (CL 7) while most of its capacity
    /// is available (`[damping] gray-failure-prune`): an opt-in departure from seed 003
    /// section 6.3, which prunes only at LQS 0 (docs/weights.md "Gray failures"). Off in
    /// lqd and in the demo unless given.
    #[arg(long)]
    pub gray_failure_prune: bool,
    /// The spines also send the diagnostics block (seed 003 section 5.5), which no weight
    /// function reads (receivers MUST NOT use it for forwarding); the leaves' path
    /// capacities come from the slow plane (`[[path-capacity]]`).
    #[arg(long)]
    pub diagnostics: bool,
    /// The leaves' `miss-count` (seed 003 section 6.5, 2-10); lqd's default 3 when not
    /// given.
    #[arg(long, value_name = "N")]
    pub miss_count: Option<u8>,
    /// FRR (zebra + bgpd) on every router, eBGP per RFC 7938: the leaves' lqd steers the
    /// routes BGP installs (`[slow-plane]`) and learns each prefix's remote leaf over BMP;
    /// ECMP is FRR's own multipath route; each draw ends with a path withdrawn by BGP
    /// under load (`withdrawn_path_traffic_ms`). Needs FRR (`cargo xtask setup`).
    #[arg(long)]
    pub bgp: bool,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Runs the demo; returns its exit code.
pub fn demo(args: &DemoArgs) -> Result<i32> {
    let lqd = build::build(&BuildArgs {
        release: true,
        target: None,
    })?
    .join("lqd");
    util::step(
        "demo",
        "building the demo program (lq-tests, release)",
        || {
            let mut c = util::cargo_cmd(None);
            c.args([
                "build",
                "--locked",
                "--release",
                "-p",
                "lq-tests",
                "--bin",
                "demo",
            ]);
            util::run(&mut c)?;
            Ok(((), "built".into()))
        },
    )?;
    let root = util::workspace_root();
    let bin = root.join("target/release/demo");
    let out = args.out.clone().unwrap_or_else(|| root.join("target/demo"));
    let mut cmd = if util::is_root() {
        Command::new(&bin)
    } else {
        println!("==> demo: not root, running the demo through `sudo`");
        let mut c = Command::new("sudo");
        c.arg(&bin);
        c
    };
    cmd.arg("--lqd").arg(&lqd).arg("--out").arg(&out);
    if args.quick {
        cmd.arg("--quick");
    }
    cmd.args(["--draws", &args.draws.to_string()]);
    cmd.args(["--seed-base", &args.seed_base.to_string()]);
    if let Some(w) = &args.weight_function {
        cmd.args(["--weight-function", w]);
    }
    if let Some(r) = &args.replace {
        cmd.args(["--replace", r]);
    }
    if args.gray_failure_prune {
        cmd.arg("--gray-failure-prune");
    }
    if args.diagnostics {
        cmd.arg("--diagnostics");
    }
    if let Some(n) = args.miss_count {
        cmd.args(["--miss-count", &n.to_string()]);
    }
    if args.bgp {
        cmd.arg("--bgp");
    }
    cmd.current_dir(root);
    // Ctrl-C goes to the whole foreground group: the demo cleans up and exits; we wait.
    ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst))
        .context("install the Ctrl-C handler")?;
    let st = util::status(&mut cmd)?;
    if INTERRUPTED.load(Ordering::SeqCst) {
        println!("==> demo: interrupted; the demo removed its namespaces");
        return Ok(130);
    }
    if !st.success() {
        bail!("the demo failed ({st})");
    }
    Ok(0)
}
