//! `cosched config`, and finding the policy file for it, the daemon and the simulator.

use anyhow::Result;
use clap::{ArgGroup, Args};
use cosched_policy::{Policy, PolicyError, DEFAULT_PATH};
use std::path::{Path, PathBuf};

/// Print the effective policy, or check a policy file
#[derive(Args)]
#[command(
    group(ArgGroup::new("action").required(true).args(["show", "check"])),
    after_help = "Examples:\n  \
  cosched config --show                        the policy the daemon would start with\n  \
  cosched config --show --config site.toml     that file's policy, every key written\n  \
  cosched config --show --json\n  \
  cosched config --check site.toml && systemctl reload cosched\n\n\
The policy file (TOML; dist/cosched.toml is an example with every key explained) holds the \
scheduler (mode, quantum, MPL, partitioner, backfilling), each class's time limits, per-user \
limits and the memory policy. `cosched daemon` and `cosched sim --config` read the same file. \
A key left out takes its default; an unknown key is refused by name. The daemon re-reads it \
on SIGHUP: the limits change at once, the rest at its next start (it logs which)."
)]
pub struct ConfigArgs {
    /// Print the effective policy (every key) as TOML that reads back as the same policy
    #[arg(long)]
    show: bool,
    /// Check a policy file: exit 0 if it is valid, else print what is wrong and exit 1. As
    /// root, also as the daemon reads it: root must own it and its directories, no one else
    /// may write them, and it may not be a link
    #[arg(long, value_name = "FILE")]
    check: Option<PathBuf>,
    /// With --show: the policy file [default: /etc/cosched/cosched.toml if it exists, else
    /// the built-in defaults]
    #[arg(long, value_name = "FILE", conflicts_with = "check")]
    config: Option<PathBuf>,
    /// With --show: print JSON instead of TOML
    #[arg(long, requires = "show")]
    json: bool,
}

/// The policy from `explicit`, else from the default path if a file is there, else the
/// built-in defaults; with the file it came from. `read` is how a file is read (the daemon
/// trusts only root's).
pub fn load(
    explicit: Option<&Path>,
    read: fn(&Path) -> Result<Policy, PolicyError>,
) -> Result<(Option<PathBuf>, Policy)> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None if Path::new(DEFAULT_PATH).exists() => PathBuf::from(DEFAULT_PATH),
        None => return Ok((None, Policy::default())),
    };
    let policy = read(&path)?;
    Ok((Some(path), policy))
}

pub fn run(args: ConfigArgs) -> Result<()> {
    if let Some(path) = args.check {
        // As root, what the daemon would refuse must not pass: `--check && systemctl reload`.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            Policy::read_trusted(&path)?;
        } else {
            Policy::read(&path)?;
        }
        println!("{}: a valid policy", path.display());
        return Ok(());
    }
    let (path, policy) = load(args.config.as_deref(), Policy::read)?;
    match &path {
        Some(path) => note!("cosched: the policy in {}", path.display()),
        None => note!("cosched: no {DEFAULT_PATH}: the built-in defaults"),
    }
    if args.json {
        println!("{}", serde_json::to_string(&policy.document())?);
    } else {
        print!("{}", policy.to_toml());
    }
    Ok(())
}
