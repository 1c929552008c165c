//! `--generate KIND`: a tool's man page or a shell's completion script, written from the same
//! clap definitions that parse the tool's options (ripgrep's `--generate` works the same way), so
//! they cannot drift apart:
//!
//! ```text
//! rawq-pktgen --generate man > rawq-pktgen.1
//! rawq-pktgen --generate complete-bash > /etc/bash_completion.d/rawq-pktgen
//! ```

use clap::{Arg, ArgMatches, Command};
use clap_complete::Shell;

/// What `--generate` takes.
pub const KINDS: [&str; 5] = [
    "man",
    "complete-bash",
    "complete-zsh",
    "complete-fish",
    "complete-elvish",
];

/// The command line parsed by `cmd` with the `--generate KIND` option added: its matches, or the
/// exit status when `--generate` was asked for and written (a refused line, `--help` and
/// `--version` end the process as clap does, through [`crate::out::clap_exit`]).
pub fn matches_of(cmd: Command) -> Result<ArgMatches, std::process::ExitCode> {
    let cmd = with_generate(cmd);
    let m = cmd
        .clone()
        .try_get_matches()
        .unwrap_or_else(|e| crate::out::clap_exit(e));
    match generate(cmd, &m) {
        Some(code) => Err(code),
        None => Ok(m),
    }
}

/// `cmd` with the `--generate KIND` option (alone on the command line: the tool's required
/// options are not asked for then).
fn with_generate(cmd: Command) -> Command {
    cmd.arg(
        Arg::new("generate")
            .long("generate")
            .value_name("KIND")
            .value_parser(KINDS)
            .exclusive(true)
            .help("Print this tool's man page or a shell's completion script, then exit"),
    )
}

/// When `m` asks for `--generate KIND`: writes it to stdout, named as the binary was invoked
/// (`rawq-pktgen`, ...), and returns the exit status; `None` otherwise.
fn generate(cmd: Command, m: &ArgMatches) -> Option<std::process::ExitCode> {
    let kind = m.get_one::<String>("generate")?;
    let bin = std::env::args_os()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| cmd.get_name().to_owned());
    let mut cmd = cmd.name(bin.clone()).bin_name(bin.clone());
    let mut buf = Vec::new();
    let shell = match kind.as_str() {
        "man" => None,
        "complete-bash" => Some(Shell::Bash),
        "complete-zsh" => Some(Shell::Zsh),
        "complete-fish" => Some(Shell::Fish),
        _ => Some(Shell::Elvish),
    };
    match shell {
        // Rendering into a Vec cannot fail for want of room; an error would be clap's own.
        None => {
            if let Err(e) = clap_mangen::Man::new(cmd).render(&mut buf) {
                say!("{bin}: cannot render the man page: {e}");
                return Some(std::process::ExitCode::FAILURE);
            }
        }
        Some(s) => clap_complete::generate(s, &mut cmd, bin, &mut buf),
    }
    out!("{}", String::from_utf8_lossy(&buf));
    Some(crate::out::status())
}
