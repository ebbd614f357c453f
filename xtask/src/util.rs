//! Shared helpers: timed steps, the child-process environment and running commands.

use std::{
    ffi::OsString,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    sync::{
        OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// Directories prepended to PATH of every child process (the bpf-linker `bin` directory).
static EXTRA_PATH: OnceLock<Vec<PathBuf>> = OnceLock::new();

/// Set while a step's `==> ... ...` line is printed without its end.
static LINE_OPEN: AtomicBool = AtomicBool::new(false);

/// Registers directories to prepend to PATH of every child process spawned from now on.
pub fn prepend_to_child_path(dirs: Vec<PathBuf>) {
    // A second registration (setup run twice in one process) keeps the first: same dirs.
    let _ = EXTRA_PATH.set(dirs);
}

/// PATH for child processes: the registered directories, then the inherited PATH.
fn child_path() -> Option<OsString> {
    let extra = EXTRA_PATH.get()?;
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let all = extra
        .iter()
        .cloned()
        .chain(std::env::split_paths(&inherited));
    std::env::join_paths(all).ok()
}

/// A command with the project's child environment (PATH with bpf-linker), run from the
/// workspace root.
pub fn command(program: &str) -> Command {
    let mut cmd = Command::new(program);
    if let Some(path) = child_path() {
        cmd.env("PATH", path);
    }
    cmd.current_dir(workspace_root());
    cmd
}

/// `cargo` (or `cargo +TOOLCHAIN` when given) with the project's child environment.
pub fn cargo_cmd(toolchain: Option<&str>) -> Command {
    let mut cmd = command("cargo");
    if let Some(t) = toolchain {
        cmd.arg(format!("+{t}"));
    }
    cmd
}

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    })
}

/// Whether we run as root (effective uid 0).
pub fn is_root() -> bool {
    // `id -u` avoids a libc dependency; the result is cached.
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    })
}

/// Formats a duration as `53.2 s` (or `0.04 s` below a tenth of a second).
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 0.1 {
        format!("{s:.2} s")
    } else {
        format!("{s:.1} s")
    }
}

/// Ends a step line that is still open, so that a child's output starts on its own line.
pub fn break_line() {
    if LINE_OPEN.swap(false, Ordering::SeqCst) {
        println!();
    }
}

/// Runs one step: prints `==> section: what ...`, runs `f` and finishes the line with the
/// outcome `f` returns (e.g. `built`, `present, skipped`) and the time it took.
pub fn step<T>(section: &str, what: &str, f: impl FnOnce() -> Result<(T, String)>) -> Result<T> {
    break_line();
    print!("==> {section}: {what} ...");
    let _ = std::io::stdout().flush();
    LINE_OPEN.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let result = f();
    let took = secs(start.elapsed());
    let reopened = !LINE_OPEN.swap(false, Ordering::SeqCst);
    if reopened {
        print!("==> {section}: {what} ...");
    }
    match result {
        Ok((value, outcome)) => {
            println!(" {outcome} in {took}");
            Ok(value)
        }
        Err(e) => {
            println!(" FAILED after {took}");
            Err(e)
        }
    }
}

/// Prints a command before running it: `    $ cargo build -p lq-user`.
pub fn echo(cmd: &Command) {
    break_line();
    let args: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect();
    println!("    $ {}", args.join(" "));
}

fn shell_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=+:,@%^".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Runs a command with inherited stdio and returns its exit status.
pub fn status(cmd: &mut Command) -> Result<ExitStatus> {
    echo(cmd);
    cmd.status().with_context(|| {
        format!(
            "could not start {:?}: is it installed and on PATH?",
            cmd.get_program()
        )
    })
}

/// Runs a command with inherited stdio and fails unless it succeeds.
pub fn run(cmd: &mut Command) -> Result<()> {
    let st = status(cmd)?;
    if !st.success() {
        bail!("{} failed ({st})", describe(cmd));
    }
    Ok(())
}

/// Runs a command quietly and returns its stdout, or `None` when it cannot start or fails.
pub fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Which output stream of a child [`run_streaming`] reads.
#[derive(Clone, Copy)]
pub enum Pipe {
    /// Read stdout (libtest results, benchmark metrics); stderr is inherited.
    Stdout,
    /// Read stderr (libFuzzer's reports); stdout is inherited.
    Stderr,
}

/// Runs a command with one stream piped through `on_line` (each line is also echoed to the
/// same stream), the other inherited. Returns the exit status.
pub fn run_streaming(
    cmd: &mut Command,
    pipe: Pipe,
    mut on_line: impl FnMut(&str),
) -> Result<ExitStatus> {
    echo(cmd);
    match pipe {
        Pipe::Stdout => cmd.stdout(Stdio::piped()),
        Pipe::Stderr => cmd.stderr(Stdio::piped()),
    };
    let mut child = cmd
        .spawn()
        .with_context(|| format!("could not start {}", describe(cmd)))?;
    let reader: Box<dyn std::io::Read> = match pipe {
        Pipe::Stdout => Box::new(child.stdout.take().context("child stdout is not piped")?),
        Pipe::Stderr => Box::new(child.stderr.take().context("child stderr is not piped")?),
    };
    for line in BufReader::new(reader).lines() {
        let line = line.context("reading the child's output")?;
        match pipe {
            Pipe::Stdout => println!("{line}"),
            Pipe::Stderr => eprintln!("{line}"),
        }
        on_line(&line);
    }
    child
        .wait()
        .with_context(|| format!("waiting for {}", describe(cmd)))
}

/// `program arg arg` for messages.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
