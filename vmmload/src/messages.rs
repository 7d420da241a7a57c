//! Where vmmload's own messages go.
//!
//! By default warnings (unsupported calls, counted bad input) and notices
//! (timeout, fatal signal) go to stderr, interleaved with the program's own
//! stderr. `-q` keeps stderr exactly what a native run writes (unless `-v`
//! asks for more); `--log FILE` sends the messages to FILE instead
//! (appended, so a program's forks and execs, which log to the same file,
//! never truncate each other).

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::OnceLock;

struct Config {
    quiet: bool,
    to_file: bool,
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Sets up the logger once at start.
pub fn init(verbose: u8, quiet: bool, log: Option<&Path>) -> std::io::Result<()> {
    // -q silences the default warnings; -v still asks for more explicitly.
    let level = match verbose {
        0 if quiet && log.is_none() => "off",
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let mut b = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level));
    b.format_timestamp(None).format_target(false);
    if let Some(path) = log {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        b.target(env_logger::Target::Pipe(Box::new(f)));
    }
    b.init();
    let _ = CONFIG.set(Config {
        quiet,
        to_file: log.is_some(),
    });
    Ok(())
}

/// A message about the run a native run would not print (the program was
/// timed out, killed by a signal): on stderr unless `-q`, and in the log.
pub fn notice(msg: &str) {
    let (quiet, to_file) = CONFIG
        .get()
        .map_or((false, false), |c| (c.quiet, c.to_file));
    if to_file {
        log::warn!("{msg}");
    }
    if !quiet {
        eprintln!("vmmload: {msg}");
    }
}
