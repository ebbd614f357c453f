//! `cargo xtask`: developer tasks for `lq` (alias in `.cargo/config.toml`).
//!
//! Every subcommand but `setup` runs what it needs of `setup` first, so a fresh Debian
//! machine needs only rustup and a C toolchain: `cargo xtask test` installs the rest, and
//! `build`, `install` and `run` install no Debian package (`setup::Needs`).
#![allow(unused_crate_dependencies)] // a test or binary root: the package's dependency list is shared by all its targets

mod bench;
mod build;
mod demo;
mod fuzz;
mod install;
mod run;
mod setup;
mod test;
mod util;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Developer tasks for lq",
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install everything needed (nightly, bpf-linker, Debian packages, bpffs); idempotent.
    Setup,
    /// Build lq-user (and through its build script the eBPF object embedded in `lqd`).
    Build(build::BuildArgs),
    /// fmt, clippy (user and eBPF), rustdoc, host unit tests and privileged tests, with a summary.
    Test(test::TestArgs),
    /// Run the cargo-fuzz targets in fuzz/ for a bounded number of executions.
    Fuzz(fuzz::FuzzArgs),
    /// Run the `bench_*` programs of lq-tests and collect their LQ-METRIC lines.
    Bench(bench::BenchArgs),
    /// The fabric demo: a 4x4 CLOS in network namespaces, lqd on every node, a job and a
    /// dynamic load under ECMP, static weights and lq; target/demo/report.json and plot.svg.
    Demo(demo::DemoArgs),
    /// Build lqd (release) and run it with the given arguments (as root).
    Run(run::RunArgs),
    /// Install lqd, its systemd unit (lqd@.service), docs and an example configuration.
    Install(install::InstallArgs),
}

fn main() {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            util::break_line();
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// Runs a subcommand; returns the process exit code.
fn dispatch(cmd: Cmd) -> Result<i32> {
    let needs = match &cmd {
        Cmd::Setup => None,
        // A cross build installs its linker (the error says so otherwise), nothing else.
        Cmd::Build(_) | Cmd::Install(_) => Some(setup::Needs::Build),
        Cmd::Run(_) => Some(setup::Needs::Run),
        Cmd::Test(_) | Cmd::Fuzz(_) | Cmd::Bench(_) | Cmd::Demo(_) => {
            Some(setup::Needs::Everything)
        }
    };
    if let Some(needs) = needs {
        setup::setup_for(needs)?;
    }
    match cmd {
        Cmd::Setup => setup::setup().map(|()| 0),
        Cmd::Build(a) => build::build(&a).map(|_| 0),
        Cmd::Test(a) => test::test(&a),
        Cmd::Fuzz(a) => fuzz::fuzz(&a),
        Cmd::Bench(a) => bench::bench(&a).map(|()| 0),
        Cmd::Demo(a) => demo::demo(&a),
        Cmd::Run(a) => run::run(&a),
        Cmd::Install(a) => install::run(&a).map(|()| 0),
    }
}
