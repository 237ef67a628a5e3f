//! `cosched`: the command line. Argument parsing and output only; the work is in the crates.
//!
//! Exit codes: 0 success, 1 the command failed (bad input file, bad option value, I/O, a
//! request the daemon refused), 2 the command line itself is malformed (from the argument
//! parser). `cosched run` and `cosched wait` exit with their job's code instead (128 + signal
//! when killed); `cosched launch-remote` with its remote process's (255 when it could not
//! start, as ssh).

/// `eprintln!` that never panics: a note to a stderr whose reader went away (a closed pipe)
/// is dropped. `eprintln!` panicked there, and `cosched run` ended with 101, not its job's
/// status.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// An allocator whose threads share no lock: glibc's malloc takes an arena's lock to free or
/// grow a block of that arena from any thread, and the slot clock (real-time) slept on its
/// own arena's lock, held by a daemon thread that a job's process had preempted: 1.4 ms in
/// the middle of a thaw in one trace, 23 such waits in a minute of churn (ARCHITECTURE.md,
/// invariant 70). mimalloc frees another thread's block onto a lock-free list.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod client;
mod config;
mod daemon;
mod gantt;
mod history;
mod jobs;
mod manual;
mod remote;
mod sim;

use clap::{Parser, Subcommand};
use cosched_proto::api::Request;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cosched",
    version,
    about = "Gang scheduler and coscheduler for parallel jobs on Linux",
    long_about = "cosched gives each parallel job its own processors where they fit (space \
sharing), opens time-shared slices where they do not (an Ousterhout matrix), and runs every \
process of a job at the same moments.\n\nStart `cosched daemon` (as root), then submit jobs \
with `cosched run -n N -- CMD`; `cosched ps`, `matrix` and `stats` show what it does. \
`cosched sim` replays workload traces through the same scheduling core."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Daemon(daemon::DaemonArgs),
    Agent(daemon::AgentArgs),
    Run(client::RunArgs),
    Wait(client::WaitArgs),
    Ps(jobs::PsArgs),
    Matrix(client::MatrixArgs),
    Stats(client::StatsArgs),
    Nodes(client::NodesArgs),
    Gantt(gantt::GanttArgs),
    ConsoleToken(client::ConsoleTokenArgs),
    History(history::HistoryArgs),
    LaunchRemote(remote::LaunchRemoteArgs),
    /// Cancel jobs: SIGTERM, then SIGKILL after a grace period
    Cancel(jobs::JobArgs),
    /// Take jobs out of the rotation and stop them
    Suspend(jobs::JobArgs),
    /// Put suspended jobs back into the rotation
    Resume(jobs::JobArgs),
    Class(client::ClassArgs),
    Sim(sim::SimArgs),
    Generate(sim::GenerateArgs),
    Config(config::ConfigArgs),
    Completions(manual::CompletionsArgs),
    #[command(hide = true)]
    ManPages(manual::ManPagesArgs),
    #[command(hide = true)]
    Supervise,
    /// A registered job's holder (the daemon runs it; see `register` in docs/protocol.md)
    #[command(hide = true)]
    Hold {
        /// Exit 3 unless a process joins the job within this many seconds
        #[arg(long, value_name = "S")]
        join_within_s: u64,
    },
}

/// `cosched launch-remote` under the name MPICH's Hydra runs as its launcher.
#[derive(Parser)]
#[command(name = "cosched-launch-remote", version)]
struct AsLaunchRemote {
    #[command(flatten)]
    args: remote::LaunchRemoteArgs,
}

fn main() -> ExitCode {
    let called = std::env::args_os().next().map(PathBuf::from);
    let name = called.as_deref().and_then(Path::file_name);
    let command = if name.is_some_and(|n| n == cosched_agent::door::LAUNCH_REMOTE_NAME) {
        Command::LaunchRemote(AsLaunchRemote::parse().args)
    } else if std::env::args_os().skip(1).eq(["supervise"]) {
        // A supervisor starts for every job, on the job's processors: building clap's whole
        // command tree was about a fifth of its start's processor time.
        Command::Supervise
    } else {
        Cli::parse().command
    };
    match execute(command) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(err) => {
            note!("cosched: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A listing piped into `head` ends as other Unix tools' do, by SIGPIPE, when the reader goes
/// (Rust ignores the signal, and a print to the closed pipe panics). Only for commands that
/// print and exit: the daemon, agent and supervisor must outlive a client that hangs up, and
/// `run` and `wait` must end with their job's status (their notes are dropped, `note!`).
fn end_quietly_when_the_reader_goes() {
    // SAFETY: restores a signal's default disposition; no other thread runs yet.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// The exit code: `run` and `wait` give their jobs' status; the rest 0 when they succeed.
fn execute(command: Command) -> anyhow::Result<i32> {
    if matches!(
        command,
        Command::Ps(_)
            | Command::Matrix(_)
            | Command::Stats(_)
            | Command::Nodes(_)
            | Command::Gantt(_)
            | Command::History(_)
            | Command::Sim(_)
            | Command::Generate(_)
            | Command::Config(_)
            | Command::Cancel(_)
            | Command::Suspend(_)
            | Command::Resume(_)
            | Command::ConsoleToken(_)
            | Command::Class(_)
            | Command::Completions(_)
            | Command::ManPages(_)
    ) || matches!(&command, Command::Daemon(args) if args.check)
    {
        end_quietly_when_the_reader_goes();
    }
    match command {
        Command::Run(args) => return client::run(args),
        Command::Wait(args) => return client::wait(args),
        Command::LaunchRemote(args) => return remote::launch_remote(args),
        Command::Daemon(args) => daemon::run(args),
        Command::Agent(args) => daemon::agent(args),
        Command::Ps(args) => jobs::ps(args),
        Command::Matrix(args) => client::matrix(args),
        Command::Stats(args) => client::stats(args),
        Command::Nodes(args) => client::nodes(args),
        Command::Gantt(args) => gantt::gantt(args),
        Command::ConsoleToken(args) => client::console_token(args),
        Command::History(args) => history::history(args),
        Command::Cancel(args) => jobs::act(args, |job| Request::Cancel { job }),
        Command::Suspend(args) => jobs::act(args, |job| Request::Suspend { job }),
        Command::Resume(args) => jobs::act(args, |job| Request::Resume { job }),
        Command::Class(args) => client::class(args),
        Command::Sim(args) => sim::run(args),
        Command::Generate(args) => sim::generate(args),
        Command::Config(args) => config::run(args),
        Command::Completions(args) => manual::completions(args),
        Command::ManPages(args) => manual::man_pages(args),
        Command::Supervise => daemon::supervise(),
        Command::Hold { join_within_s } => {
            let within = std::time::Duration::from_secs(join_within_s);
            return Ok(cosched_agent::holder::hold(within)?);
        }
    }?;
    Ok(0)
}
