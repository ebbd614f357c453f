//! `cargo xtask run -- <lqd args>`: builds `lqd` (release) and runs it as root.

use std::process::Command;

use anyhow::{Context as _, Result};
use clap::Args;

use crate::{
    build::{self, BuildArgs},
    util,
};

#[derive(Args)]
pub struct RunArgs {
    /// Arguments for lqd (after `--`).
    #[arg(last = true, value_name = "LQD_ARGS")]
    pub args: Vec<String>,
}

/// Runs lqd and returns its exit code.
pub fn run(args: &RunArgs) -> Result<i32> {
    let build_args = BuildArgs {
        release: true,
        target: None,
    };
    let lqd = build::build(&build_args)?.join("lqd");
    let mut cmd = if util::is_root() {
        Command::new(&lqd)
    } else {
        println!("==> run: not root, running lqd through `sudo -E`");
        let mut c = Command::new("sudo");
        c.arg("-E").arg(&lqd);
        c
    };
    cmd.args(&args.args);
    let st =
        util::status(&mut cmd).with_context(|| format!("could not start {}", lqd.display()))?;
    // Killed by a signal: the shell convention 128 + signal.
    Ok(st.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt as _;
        128 + st.signal().unwrap_or(0)
    }))
}
