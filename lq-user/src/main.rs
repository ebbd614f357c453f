//! `lqd`: the lq daemon and its command-line tools.

mod cli;

use std::{
    io::{self, Read as _, Write},
    path::Path,
    process::ExitCode,
};

use clap::Parser as _;
use lq_user::{
    decode::{EXIT_ERROR, parse_hex, run_frames, run_payload},
    pcap,
};

use crate::cli::{Cli, Command, DecodeArgs, LogFormat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log_level, cli.log_format);
    match cli.command {
        Command::Decode(args) => decode(&args),
    }
}

fn init_tracing(filter: &str, format: LogFormat) {
    // The filter was validated when the command line was parsed.
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Prints `lqd decode: MESSAGE` and returns exit status 2.
fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("lqd decode: {message}");
    ExitCode::from(EXIT_ERROR)
}

fn decode(args: &DecodeArgs) -> ExitCode {
    let opts = args.options();
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut err = io::stderr();
    let result = match &args.pcap {
        None => match parse_hex(&args.hex) {
            Ok(payload) => run_payload(&payload, &opts, &mut out, &mut err),
            Err(e) => return fail(format_args!("invalid hex payload: {e}")),
        },
        Some(path) => {
            let bytes = match read_file(path) {
                Ok(b) => b,
                Err(e) => {
                    return fail(format_args!(
                        "cannot read capture file {}: {e}",
                        path.display()
                    ));
                }
            };
            let capture = match pcap::read_ethernet(&bytes) {
                Ok(c) => c,
                Err(e) => return fail(format_args!("capture file {}: {e}", path.display())),
            };
            tracing::debug!(format = ?capture.format, frames = capture.frames.len(), "capture read");
            run_frames(&capture.frames, &opts, &mut out, &mut err).map(|s| s.exit_status())
        }
    };
    match result.and_then(|code| out.flush().map(|()| code)) {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`lqd decode ... | head`): nothing left to say.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(EXIT_ERROR),
        Err(e) => fail(format_args!("cannot write the output: {e}")),
    }
}

fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut b = Vec::new();
        io::stdin().lock().read_to_end(&mut b)?;
        Ok(b)
    } else {
        std::fs::read(path)
    }
}
