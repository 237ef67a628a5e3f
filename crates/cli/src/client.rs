//! The client commands: `run`, `ps`, `matrix`, `stats`, `cancel`, `suspend`, `resume`, `class`.
//! Each opens the daemon's socket, sends one request and prints the reply.

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use cosched_os::unix;
use cosched_proto::api::{MatrixView, NodeView, Reply, Request, RunRequest, StatsView};
use cosched_proto::pattern::{expand, fill, names, PatternFields};
use cosched_proto::{ExitInfo, JobState, Mode, Summary};
use std::io::{IsTerminal, Write as _};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where to find the daemon (every client command has it).
#[derive(Args, Clone)]
pub struct Socket {
    /// The daemon's socket
    #[arg(long, env = "COSCHED_SOCKET", default_value = crate::daemon::DEFAULT_SOCKET,
          value_name = "PATH", global = true)]
    socket: PathBuf,
}

impl Socket {
    pub fn path(&self) -> &Path {
        &self.socket
    }
}

const REPLY_LIMIT: usize = 64 << 20;

/// Connects to the daemon, and makes sure it is one: a socket served by another user (at a
/// path that user could write) would receive this user's environment and descriptors.
fn connect(socket: &Path) -> Result<UnixStream> {
    let stream = UnixStream::connect(socket).with_context(|| {
        format!(
            "cannot reach the daemon at {} (is `cosched daemon` running? set --socket or COSCHED_SOCKET)",
            socket.display()
        )
    })?;
    let peer = unix::peer_credentials(&stream)
        .with_context(|| format!("{}: whose socket is it", socket.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if peer.uid != 0 && peer.uid != me {
        bail!(
            "{} is served by uid {} (neither root nor you), not by the cosched daemon; \
             refusing to send it anything",
            socket.display(),
            peer.uid
        );
    }
    Ok(stream)
}

fn send(stream: &UnixStream, request: &Request, fds: &[RawFd]) -> Result<()> {
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    if let Err(error) = unix::send_with_fds(stream, &line, fds) {
        // A daemon that refused the connection said why before closing it.
        if let Ok(Some(Reply::Error { error, .. })) = receive(stream) {
            bail!("{error}");
        }
        return Err(error).context("sending the request");
    }
    Ok(())
}

fn receive(stream: &UnixStream) -> Result<Option<Reply>> {
    match unix::read_line(stream, REPLY_LIMIT) {
        Ok(Some(line)) => Ok(Some(
            serde_json::from_slice(&line).context("the daemon's reply is not understood")?,
        )),
        Ok(None) => Ok(None),
        Err(unix::LineError::Io(e)) => Err(e.into()),
        Err(unix::LineError::TooLong(limit)) => Err(anyhow!(
            "the daemon's reply is longer than the {} MiB this client reads",
            limit >> 20
        )),
        Err(e) => Err(e.into()),
    }
}

/// One request, one reply; a refusal becomes an error with the daemon's words.
pub fn ask(socket: &Path, request: &Request) -> Result<Reply> {
    let stream = connect(socket)?;
    send(&stream, request, &[])?;
    match receive(&stream)? {
        Some(Reply::Error { error, .. }) => bail!("{error}"),
        Some(reply) => Ok(reply),
        None => bail!("the daemon closed the connection without a reply"),
    }
}

/// Run a parallel job under the daemon (like AP/Linux's prun): blocks, shares this terminal,
/// and exits with the job's exit code.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  cosched run hostname                                  # one processor\n  \
  cosched run -n 2 -- mpirun -np 2 --bind-to none ./stencil\n  \
  cosched run -N 2 -n 2 -- mpirun -np 2 --bind-to none ./pingpong   # one rank per node\n  \
  cosched run -n 1 --class interactive -- make -j1\n  \
  cosched run -n 4 --detach -o sim-%j.log -e sim-%j.err -- ./sim --steps 1000\n  \
  id=$(cosched run -n 2 --detach -- ./sim)      # output in cosched-$id.out\n\n\
The job runs as you, in this directory, with this environment plus COSCHED_JOB_ID, \
COSCHED_CPUS (its processors), COSCHED_NTASKS (its processor count), COSCHED_NODELIST (its \
nodes: this machine's host name on one machine) and COSCHED_HOSTFILE (a file of `HOST slots=N` \
lines, one a node, for `mpirun --hostfile`), and with this command's resource limits (`ulimit \
-a`, as srun propagates them: lower one with `ulimit` first). Arguments after the command are \
the command's; \
write `--` before a command that starts with `-`. No shell is involved: write `sh -c '...'` \
for one. The exit code is the job's (128 + the signal when it was killed); the job ends \
completed (exit 0) or failed (any other end of its own). Ctrl-C (or a TERM or HUP to this \
command) cancels the job. A job that cannot start at once is said to be queued, and why, on \
standard error, then where it started (--quiet: neither). If the daemon restarts meanwhile, \
the job keeps running and this command waits for it.\n\n\
--output and --error are opened here, as you, before the job is submitted (truncated unless \
--open-mode append); a pattern naming %j makes the file under a temporary name in its \
directory and names it once the job has its id. With --detach the job reads nothing; its \
output goes to this terminal when standard output is one, else (in a script) to --output or \
cosched-JOBID.out here, and only the id is printed, as sbatch does. In a cluster the job's \
processes are on its nodes, not here: its output goes to --output (%j and %N filled in there) \
or cosched-JOBID.out in this directory as seen on those nodes (a shared file system, as for \
sbatch), and --error likewise, opened there as you and appended to, as this command says on \
standard error; across nodes, mpirun finds the job's hosts in COSCHED_HOSTS and \
COSCHED_HOSTFILE (Open MPI reads them by itself).")]
pub struct RunArgs {
    /// Processors the job needs
    #[arg(short = 'n', long = "procs", value_name = "N", default_value_t = 1)]
    procs: u32,
    /// Spread the processors evenly over this many distinct nodes (N/NODES on each; N must be
    /// a multiple) [default: wherever the partitioner puts them, perhaps all on one node]
    #[arg(short = 'N', long = "nodes", value_name = "NODES")]
    nodes: Option<u32>,
    /// express (root only), interactive, batch or standby. An interactive job runs ahead of
    /// batch jobs on its processors for its first seconds (the daemon's
    /// --interactive-preempt), one of yours at a time and one such stretch in any six; past
    /// that it time-shares from its start, and this command says so
    #[arg(long, default_value = "batch")]
    class: String,
    /// A name shown by ps [default: the program's name]
    #[arg(long)]
    name: Option<String>,
    /// Print the job id and return at once (see below for where the output goes)
    #[arg(long)]
    detach: bool,
    /// Write the job's stdout (and stderr, unless --error) to this file: a pattern where %j
    /// is the job id, %x its name, %u your user name, %N its first node, %% a percent sign
    #[arg(short, long, value_name = "PATTERN")]
    output: Option<String>,
    /// Write the job's stderr to this file (a pattern as --output's)
    #[arg(short, long, value_name = "PATTERN")]
    error: Option<String>,
    /// Whether --output and --error start the files afresh or add to them
    #[arg(long, value_name = "MODE", default_value = "truncate")]
    open_mode: OpenMode,
    /// Say nothing on standard error about waiting in the queue and starting
    #[arg(short, long)]
    quiet: bool,
    /// Time limit, counted in time the job is let run (not time frozen in other jobs'
    /// slots): minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, as in Slurm. At the
    /// limit the job gets SIGTERM, then SIGKILL after the grace, and ends `timeout`.
    /// Backfilling starts jobs with limits ahead of wider ones when they cannot delay them
    /// [default: its class's, from the policy file]
    #[arg(short = 't', long = "time", value_name = "LIMIT", value_parser = parse_time)]
    time: Option<u64>,
    /// Memory the job needs on each node it runs on: 512M, 4G (a bare number is megabytes).
    /// Jobs that time-share a node's processors must fit in its memory together
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, conflicts_with = "mem_per_cpu")]
    mem: Option<u64>,
    /// Memory the job needs per processor it has (instead of --mem)
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    mem_per_cpu: Option<u64>,
    /// How this job's processes are made to run together, beside jobs in other modes: gang
    /// (frozen outside its slots: fine-grained programs), moderate (favoured in its slots,
    /// using idle processors in others: coarse ones), implicit (never switched, waits
    /// spin-then-block: I/O-bound ones), or auto (measured in its first seconds, then the
    /// one of those it runs best in; `ps` shows auto:CHOSEN) [default: the daemon's mode]
    #[arg(long, value_name = "MODE", value_parser = parse_job_mode)]
    mode: Option<Mode>,
    /// The command and its arguments (after `--` when they start with `-`)
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<String>,
    #[command(flatten)]
    socket: Socket,
}

/// A time limit in Slurm's formats, as whole seconds.
fn parse_time(text: &str) -> Result<u64, String> {
    cosched_core::parse_duration(text)
        .map(|micros| (micros / cosched_core::MICROS_PER_SEC) as u64)
        .map_err(|e| e.to_string())
}

/// A memory size for jobs or nodes: below a mebibyte no program starts (a job given less
/// would be killed by its cgroup at once).
/// A job's mode: any but `local`, a whole machine's.
fn parse_job_mode(text: &str) -> Result<Mode, String> {
    let mode: Mode = text
        .parse()
        .map_err(|e: cosched_proto::UnknownMode| e.to_string())?;
    match mode.for_jobs() {
        true => Ok(mode),
        false => Err(format!(
            "{mode} is a whole machine's mode (cosched daemon --mode), not a job's: gang, moderate, implicit or auto"
        )),
    }
}

pub(crate) fn parse_memory(text: &str) -> Result<u64, String> {
    const SMALLEST: u64 = 1 << 20;
    match cosched_core::parse_size(text) {
        Ok(bytes) if bytes < SMALLEST => Err(format!(
            "'{text}' is less than 1M: too little for any program to start"
        )),
        other => other.map_err(|e| e.to_string()),
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// The signals that cancel a job its client waits for.
const INTERRUPTS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Ctrl-C, and as srun does a TERM (`timeout`, a killed script) or a HUP (a closed
/// session), cancel the job: else it would run on with no one waiting for it.
fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic; SA_RESTART is off so blocking reads return.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_interrupt as *const () as usize;
        libc::sigemptyset(&mut action.sa_mask);
        for signal in INTERRUPTS {
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// Holds the interrupts back (`true`) while a waiting run submits its job, or lets them
/// through (`false`): one that came between the job's creation and `catch_interrupts` killed
/// the client and left the job running with no one waiting for it. One held is delivered on
/// release: caught by then, it cancels the job.
fn hold_interrupts(held: bool) {
    let how = if held {
        libc::SIG_BLOCK
    } else {
        libc::SIG_UNBLOCK
    };
    let set = unix::signal_set(&INTERRUPTS);
    // SAFETY: a valid set and no old one, for this (the only) thread.
    unsafe { libc::pthread_sigmask(how, &set, std::ptr::null_mut()) };
}

pub fn run(args: RunArgs) -> Result<i32> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let cwd = std::env::current_dir().context("this directory")?;
    let cwd = cwd
        .to_str()
        .ok_or_else(|| anyhow!("the working directory {} is not UTF-8", cwd.display()))?
        .to_string();
    let null = std::fs::File::open("/dev/null").context("/dev/null")?;
    let name = args.name.clone().unwrap_or_else(|| {
        let program = &args.command[0];
        program.rsplit('/').next().unwrap_or(program).to_string()
    });
    // SAFETY: geteuid has no preconditions.
    let user = unix::user_name(unsafe { libc::geteuid() });
    let host = cosched_os::host_name().context("this machine's host name")?;
    // The job and its node are filled in once known.
    let fields = PatternFields {
        job: None,
        name: Some(&name),
        user: Some(&user),
        node: None,
    };
    // A detached job must not hold a pipe its caller waits on (`id=$(cosched run --detach ...)`).
    let default_output = args.output.is_none() && args.detach && !std::io::stdout().is_terminal();
    let output = match (&args.output, default_output) {
        (Some(pattern), _) => Some(OutputFile::open(
            pattern,
            &fields,
            &host,
            args.open_mode,
            Stream::Output,
        )?),
        (None, true) => Some(OutputFile::open(
            DEFAULT_OUTPUT,
            &fields,
            &host,
            args.open_mode,
            Stream::Output,
        )?),
        (None, false) => None,
    };
    let errors = match &args.error {
        Some(pattern) => Some(OutputFile::open(
            pattern,
            &fields,
            &host,
            args.open_mode,
            Stream::Error,
        )?),
        None => None,
    };
    let stdin = if args.detach { null.as_raw_fd() } else { 0 };
    let stdout = output.as_ref().map_or(1, |o| o.file.as_raw_fd());
    let stderr = match (&errors, &output) {
        (Some(file), _) | (None, Some(file)) => file.file.as_raw_fd(),
        (None, None) => 2,
    };
    // Where the descriptors sent cannot go (a cluster's nodes), the job opens them there,
    // filling in %j and %N.
    let there = |pattern: &Option<String>| -> Result<Option<String>> {
        match pattern {
            Some(pattern) => Ok(Some(absolute(&cwd, &expand(pattern, &fields)?)?)),
            None => Ok(None),
        }
    };
    let (output_path, error_path) = (there(&args.output)?, there(&args.error)?);
    let request = Request::Run(RunRequest {
        argv: args.command,
        env,
        cwd,
        procs: args.procs,
        node_count: args.nodes,
        class: Some(args.class),
        name: args.name,
        detach: args.detach,
        stdio: true,
        output: output_path,
        error: error_path.clone(),
        time_limit_s: args.time,
        mem_bytes: args.mem,
        mem_per_cpu_bytes: args.mem_per_cpu,
        mode: args.mode,
    });
    let socket = args.socket.socket;
    let waits = !args.detach;
    hold_interrupts(waits);
    let submitted = connect(&socket).and_then(|stream| {
        send(&stream, &request, &[stdin, stdout, stderr])?;
        match receive(&stream)? {
            Some(Reply::Submitted {
                job,
                output,
                reason,
                note,
                ..
            }) => Ok((stream, job, output, reason, note)),
            Some(Reply::Error { error, .. }) => bail!("{error}"),
            _ => bail!("the daemon closed the connection without a reply"),
        }
    });
    if waits && submitted.is_ok() {
        catch_interrupts();
    }
    hold_interrupts(false);
    let (stream, job, elsewhere, reason, note) = match submitted {
        Ok(submitted) => submitted,
        Err(error) => {
            for file in output.iter().chain(&errors) {
                file.abandon();
            }
            return Err(error);
        }
    };
    let stderr_is_the_jobs = elsewhere.is_none() && output.is_none() && errors.is_none();
    // The job exists now: a script must get its id whatever happens to a file's name (one
    // that retried would run it twice).
    for file in output.iter().chain(&errors) {
        match &elsewhere {
            Some(_) => file.abandon(),
            None => file.name(job, args.open_mode),
        }
    }
    if let Some(note) = note {
        note!("cosched: job {job} {note}");
    }
    if let Some(place) = elsewhere {
        note!("cosched: job {job} writes its output to {place}");
        if let Some(pattern) = error_path {
            let errors = fill(&pattern, job, None);
            note!("cosched: job {job} writes its stderr to {errors} on its nodes");
        }
    }
    if args.detach {
        // Not `println!`: a closed stdout panicked (101) with the job submitted.
        writeln!(std::io::stdout(), "{job}").context("saying the job's id on stdout")?;
        return Ok(0);
    }
    let queued = reason.filter(|_| !args.quiet);
    if let Some(reason) = queued {
        note!(
            "cosched: job {job} queued and waiting: {} ({reason})",
            reason.explained()
        );
    }
    let attached = Attached {
        stdio: true,
        stderr_is_the_jobs,
    };
    wait_for(&socket, job, stream, attached, queued.is_some())
}

/// What a waiting client shares with its job.
#[derive(Clone, Copy)]
struct Attached {
    /// It sent its stdin, stdout and stderr for the job (again when it reconnects).
    stdio: bool,
    /// The job's stderr is its own: what the job's supervisor wrote there was seen here.
    stderr_is_the_jobs: bool,
}

/// Where a detached job's output goes by default.
const DEFAULT_OUTPUT: &str = "cosched-%j.out";

/// How --output and --error open their files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OpenMode {
    Truncate,
    Append,
}

/// Which of the job's streams a file takes.
#[derive(Clone, Copy)]
enum Stream {
    /// Stdout, and stderr unless --error.
    Output,
    Error,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Output => "output",
            Stream::Error => "stderr",
        }
    }

    /// A temporary file's ending.
    fn suffix(self) -> &'static str {
        match self {
            Stream::Output => "out",
            Stream::Error => "err",
        }
    }
}

/// A file of the job's output, opened here, as the user who submits (the daemon, root, never
/// opens it: root's rights would write where the user may not, through any link).
struct OutputFile {
    file: std::fs::File,
    /// A pattern naming the job id or the node is made under a temporary name
    /// (`.cosched-PID.out` in its directory) and named once the job has an id: that name,
    /// and the pattern with what fills it in then.
    pending: Option<(PathBuf, (String, String))>,
    stream: Stream,
}

impl OutputFile {
    /// Opens the file `pattern` names, `fields` filled in (all but the job and the node:
    /// `host` is this machine's name, for `%N` where the job runs here).
    fn open(
        pattern: &str,
        fields: &PatternFields,
        host: &str,
        mode: OpenMode,
        stream: Stream,
    ) -> Result<Self> {
        let what = stream.name();
        let local = expand(pattern, fields)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true);
        // Named by the job or by where it runs: made under a temporary name until the daemon
        // says (a cluster's job opens its own files on its node, and this one goes).
        if !names(&local, 'j') && !names(&local, 'N') {
            let path = fill(&local, 0, Some(host));
            match mode {
                OpenMode::Truncate => options.create(true).truncate(true),
                OpenMode::Append => options.create(true).append(true),
            };
            let file = options
                .open(&path)
                .with_context(|| format!("opening the job's {what} file {path}"))?;
            return Ok(OutputFile {
                file,
                pending: None,
                stream,
            });
        }
        let dir = Path::new(&local).parent().unwrap_or(Path::new(""));
        let dir_text = dir.to_string_lossy();
        if names(&dir_text, 'j') || names(&dir_text, 'N') {
            bail!("output pattern {pattern:?}: %j and %N may name the file, not a directory");
        }
        let pending = dir.join(format!(
            ".cosched-{}.{}",
            std::process::id(),
            stream.suffix()
        ));
        let file = options.create_new(true).open(&pending).with_context(|| {
            // A name without a directory (the default `cosched-%j.out`) is made here.
            let place = match dir.as_os_str().is_empty() {
                true => std::env::current_dir().map_or_else(
                    |_| "the working directory".into(),
                    |here| here.display().to_string(),
                ),
                false => dir.display().to_string(),
            };
            format!("creating the job's {what} file in {place}")
        })?;
        Ok(OutputFile {
            file,
            pending: Some((pending, (local, host.to_string()))),
            stream,
        })
    }

    /// Gives the file its name now the job has an id (appending to an existing file of that
    /// name cannot be done any more: the job writes to this one; it keeps its temporary name).
    fn name(&self, job: u64, mode: OpenMode) {
        let Some((pending, (pattern, host))) = &self.pending else {
            return;
        };
        let named = fill(pattern, job, Some(host));
        let what = self.stream.name();
        let outcome = match mode {
            OpenMode::Append if Path::new(&named).exists() => Err(anyhow!(
                "{named} exists and this job's {what} cannot be appended to it"
            )),
            _ => std::fs::rename(pending, &named)
                .with_context(|| format!("naming the job's {what} file {named}")),
        };
        if let Err(error) = outcome {
            note!(
                "cosched: job {job} writes its {what} to {} ({error:#})",
                pending.display()
            );
        }
    }

    /// The job was not taken, or writes elsewhere: its temporary file goes.
    fn abandon(&self) {
        if let Some((pending, _)) = &self.pending {
            let _ = std::fs::remove_file(pending);
        }
    }
}

/// `path` as seen from `cwd`, as a string the daemon takes.
fn absolute(cwd: &str, path: &str) -> Result<String> {
    let joined = std::path::Path::new(cwd).join(path);
    joined
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("the output file {path} is not UTF-8"))
}

/// Wait for jobs to end (jobs started with `run --detach`, or anyone's): blocks without
/// polling, and exits 0 when every job exited 0, else with the first failed job's status.
#[derive(Args)]
#[command(after_help = "Examples:\n  \
  id=$(cosched run -n 2 --detach --output sim.log -- ./sim) && cosched wait $id\n  \
  cosched wait 12 13 14 && echo all three succeeded\n\n\
The status is the job's exit code, 128 + the signal that killed it, or 1 for a job cancelled \
before it ran. Ctrl-C stops waiting and leaves the jobs alone. A daemon restart meanwhile is \
waited through.")]
pub struct WaitArgs {
    /// The jobs' ids
    #[arg(required = true, value_name = "JOB")]
    jobs: Vec<u64>,
    #[command(flatten)]
    socket: Socket,
}

pub fn wait(args: WaitArgs) -> Result<i32> {
    let socket = args.socket.socket;
    let mut first_failure = 0;
    for job in args.jobs {
        let stream = connect(&socket)?;
        send(&stream, &Request::Wait { job, stdio: false }, &[])?;
        let detached = Attached {
            stdio: false,
            stderr_is_the_jobs: false,
        };
        let status = wait_for(&socket, job, stream, detached, false)?;
        if first_failure == 0 {
            first_failure = status;
        }
    }
    Ok(first_failure)
}

/// Waits for the end of `job` on `stream`; cancels it on Ctrl-C when interrupts are caught;
/// outlives daemon restarts (handing this terminal to the job again when `stdio`). With
/// `queued`, says where the job starts once it does (as srun's "has been allocated").
fn wait_for(
    socket: &Path,
    job: u64,
    mut stream: UnixStream,
    attached: Attached,
    mut queued: bool,
) -> Result<i32> {
    let stdio = attached.stdio;
    let mut cancelled = false;
    let mut told_lost = false;
    let mut looked = std::time::Instant::now();
    loop {
        stream.set_read_timeout(Some(Duration::from_millis(200)))?;
        let outcome = receive(&stream);
        // Once a second at most, and only while it waits: the daemon sends no word of a start.
        if queued && looked.elapsed() >= Duration::from_secs(1) {
            looked = std::time::Instant::now();
            if let Ok(Reply::Jobs { jobs, .. }) = ask(
                socket,
                &Request::Ps {
                    all: true,
                    job: Some(job),
                },
            ) {
                if let Some(view) = jobs.first().filter(|v| v.started_us.is_some()) {
                    queued = false;
                    note!(
                        "cosched: job {job} has been allocated resources: CPUs {}",
                        view.cpus.as_deref().unwrap_or("-")
                    );
                }
            }
        }
        if INTERRUPTED.load(Ordering::SeqCst) && !cancelled {
            cancelled = true;
            note!("cosched: cancelling job {job}");
            if let Err(error) = ask(socket, &Request::Cancel { job }) {
                note!("cosched: {error:#}");
            }
        }
        match outcome {
            Ok(Some(Reply::Ended {
                state, exit, note, ..
            })) => {
                // Said once: the supervisor's own note reached this stderr as the job's.
                let seen = attached.stderr_is_the_jobs
                    && note
                        .as_deref()
                        .is_some_and(cosched_agent::supervisor::written_to_the_jobs_stderr);
                if let Some(note) = note.filter(|_| !seen) {
                    note!("cosched: job {job}: {note}");
                }
                return Ok(exit_status(job, state, exit));
            }
            Ok(Some(Reply::Error { error, .. })) => bail!("{error}"),
            Ok(Some(_)) => bail!("unexpected reply while waiting for job {job}"),
            Err(e) if is_timeout(&e) => continue,
            Ok(None) | Err(_) => {
                if !told_lost {
                    told_lost = true;
                    note!(
                        "cosched: lost the daemon; job {job} keeps running, waiting for the daemon to come back"
                    );
                }
                std::thread::sleep(Duration::from_millis(250));
                if let Ok(again) = UnixStream::connect(socket) {
                    let fds: &[RawFd] = if stdio { &[0, 1, 2] } else { &[] };
                    if send(&again, &Request::Wait { job, stdio }, fds).is_ok() {
                        stream = again;
                    }
                }
            }
        }
    }
}

fn is_timeout(error: &anyhow::Error) -> bool {
    error.downcast_ref::<std::io::Error>().is_some_and(|e| {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted
        )
    }) || error
        .downcast_ref::<unix::LineError>()
        .is_some_and(|e| matches!(e, unix::LineError::Io(io) if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted)))
}

fn exit_status(job: u64, state: JobState, exit: Option<ExitInfo>) -> i32 {
    match exit {
        Some(exit) if state == JobState::Cancelled => {
            note!("cosched: job {job} cancelled");
            exit.shell_status()
        }
        Some(exit) if state == JobState::Timeout => {
            note!("cosched: job {job} stopped at its time limit");
            exit.shell_status()
        }
        // Ended by cosched for what it did (out of memory): its script's own 0 is no success.
        Some(exit) if state == JobState::Failed => {
            if exit.signal.is_some() {
                note!("cosched: job {job} failed: killed by {exit}");
            }
            exit.shell_status().max(1)
        }
        Some(exit) => exit.shell_status(),
        None => {
            note!("cosched: job {job} {state} without running to its end");
            1
        }
    }
}

/// At most `width` characters, control characters shown as '?': another user's command line
/// must not write escape sequences to the terminal of whoever runs `ps`.
pub(crate) fn truncate(text: &str, width: usize) -> String {
    let shown = text.chars().map(|c| if c.is_control() { '?' } else { c });
    if text.chars().count() <= width {
        shown.collect()
    } else {
        shown.take(width - 1).chain(std::iter::once('~')).collect()
    }
}

/// Show the Ousterhout matrix: slices by processors, the running slice marked.
#[derive(Args)]
pub struct MatrixArgs {
    /// Print the matrix as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    socket: Socket,
}

/// Prints a view as JSON for scripts, or rendered for people.
fn show<V: serde::Serialize + ?Sized>(
    json: bool,
    view: &V,
    render: fn(&V) -> String,
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(view)?);
    } else {
        print!("{}", render(view));
    }
    Ok(())
}

pub fn matrix(args: MatrixArgs) -> Result<()> {
    let Reply::Matrix { matrix, .. } = ask(&args.socket.socket, &Request::Matrix)? else {
        bail!("unexpected reply to matrix");
    };
    show(args.json, &matrix, render_matrix)
}

fn render_matrix(m: &MatrixView) -> String {
    let procs = m.procs as usize;
    let width = m
        .slices
        .iter()
        .flatten()
        .map(|e| e.job.to_string().len())
        .max()
        .unwrap_or(1)
        .max(procs.saturating_sub(1).to_string().len());
    let mut out = format!(
        "{} mode, quantum {} ms, generation {}, slot {}\n",
        m.mode,
        m.quantum_us as f64 / 1000.0,
        m.generation,
        m.slot
    );
    out += &format!("{:>9} ", "cpu");
    for cpu in 0..procs {
        out += &format!(" {cpu:>width$}");
    }
    out.push('\n');
    for (index, slice) in m.slices.iter().enumerate() {
        let mut cells = vec![".".to_string(); procs];
        for entry in slice {
            for cpu in entry.processors() {
                if cpu < procs {
                    cells[cpu] = entry.job.to_string();
                }
            }
        }
        let mark = if m.running_slice == Some(index) {
            '*'
        } else {
            ' '
        };
        out += &format!("{mark} slice {index:>1} ");
        for cell in cells {
            out += &format!(" {cell:>width$}");
        }
        out.push('\n');
    }
    if m.slices.is_empty() {
        out += "  (no job placed)\n";
    }
    if !m.processors.is_empty() {
        let names: Vec<String> = (m.processors.iter().enumerate())
            .map(|(cpu, name)| format!("{cpu}={name}"))
            .collect();
        out += &format!("cpu = node/cpu: {}\n", names.join(" "));
    }
    if !m.queued.is_empty() {
        let queued: Vec<String> = m.queued.iter().map(|j| j.to_string()).collect();
        out += &format!("queued: {}\n", queued.join(" "));
    }
    out += "* = the slice running now\n";
    out
}

/// Print a token with which the web console acts as you (suspend, resume, cancel, class)
#[derive(Args)]
#[command(
    after_help = "The daemon serves its console with `cosched daemon --http 9464`: open \
http://127.0.0.1:9464/ and paste the token into the page's token field. Anyone who can reach \
the port may look; the token lets the page act as you, with the powers you have on the socket \
(your own jobs; root: all), until you ask for another one or the daemon restarts. Keep it as \
you would a password."
)]
pub struct ConsoleTokenArgs {
    #[command(flatten)]
    socket: Socket,
}

pub fn console_token(args: ConsoleTokenArgs) -> Result<()> {
    let Reply::Token { token, .. } = ask(&args.socket.socket, &Request::ConsoleToken)? else {
        bail!("unexpected reply to console_token");
    };
    println!("{token}");
    Ok(())
}

/// Show switch statistics: slot lateness, switch time and skew (p50/p99/max).
#[derive(Args)]
pub struct StatsArgs {
    /// Print the figures as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    socket: Socket,
}

pub fn stats(args: StatsArgs) -> Result<()> {
    let Reply::Stats { stats, .. } = ask(&args.socket.socket, &Request::Stats)? else {
        bail!("unexpected reply to stats");
    };
    show(args.json, &stats, render_stats)
}

fn render_stats(s: &StatsView) -> String {
    let mut out = format!(
        "{} mode, quantum {} ms, {}{}\n",
        s.mode,
        s.quantum_ms,
        s.actuator,
        if s.realtime {
            ""
        } else {
            " (clock NOT real-time)"
        }
    );
    out += &format!(
        "{:<28} {:>8} {:>8} {:>8} {:>8}\n",
        "(µs)", "p50", "p99", "max", "count"
    );
    let row = |name: &str, v: &Summary| {
        format!(
            "{name:<28} {:>8} {:>8} {:>8} {:>8}\n",
            v.p50, v.p99, v.max, v.count
        )
    };
    out += &row("slot lateness", &s.lateness_us);
    out += &row("switch (stop + start)", &s.switch_us);
    out += &row("skew (first to last task)", &s.skew_us);
    out += &format!(
        "jobs: {} running, {} queued, {} ended (latest, kept in memory); {} idle departures; \
         {} missed slots; {} clients waiting\n",
        s.jobs_running,
        s.jobs_queued,
        s.jobs_ended,
        s.idle_departures,
        s.missed_slots,
        s.clients_waiting
    );
    out
}

/// Show the nodes: their CPUs, whether they follow the plan (scheduling), run their jobs
/// unscheduled (loose: the agent lost the control plane) or left the cluster (left: its
/// processors are withheld until it is back), the last generation applied, clock offset and
/// boundary lateness, as each node's agent last reported.
#[derive(Args)]
pub struct NodesArgs {
    /// Print the nodes as JSON
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    socket: Socket,
}

pub fn nodes(args: NodesArgs) -> Result<()> {
    let Reply::Nodes { nodes, .. } = ask(&args.socket.socket, &Request::Nodes)? else {
        bail!("unexpected reply to nodes");
    };
    show(args.json, nodes.as_slice(), render_nodes)
}

fn render_nodes(nodes: &[NodeView]) -> String {
    let mut out = format!(
        "{:<12} {:<10} {:<10} {:>6} {:>8} {:>14} {:>10} {:>7} {:>10}\n",
        "NODE", "CPUS", "STATE", "GEN", "HEARD", "LATE p50/p99", "SKEW p99", "MISSED", "OFFSET"
    );
    for node in nodes {
        let s = &node.status;
        let state = match (node.left, s.scheduling) {
            (true, _) => "left",
            (false, true) => "scheduling",
            (false, false) => "loose",
        };
        let generation = s.generation.map_or("-".into(), |g| g.to_string());
        let heard = format!("{:.1} s", node.heard_ms_ago as f64 / 1000.0);
        let late = format!("{}/{} µs", s.lateness_us.p50, s.lateness_us.p99);
        let skew = format!("{} µs", s.skew_us.p99);
        let offset = match (s.clock_offset_us, s.clock_shift_us) {
            (Some(offset), 0) => format!("{offset} µs"),
            (None, 0) => "unknown".into(),
            (offset, shift) => format!(
                "{}{shift:+} µs",
                offset.map_or("?".into(), |o| o.to_string())
            ),
        };
        out += &format!(
            "{:<12} {:<10} {:<10} {:>6} {:>8} {:>14} {:>10} {:>7} {:>10}\n",
            node.name,
            s.cpus.to_string(),
            state,
            generation,
            heard,
            late,
            skew,
            s.missed_slots,
            offset
        );
    }
    if nodes.is_empty() {
        out += "(no node has reported yet)\n";
    }
    out
}

/// Change a job's class (owners may lower it; only root may raise it or use express).
#[derive(Args)]
pub struct ClassArgs {
    job: u64,
    /// express, interactive, batch or standby
    class: String,
    #[command(flatten)]
    socket: Socket,
}

pub fn class(args: ClassArgs) -> Result<()> {
    let request = Request::Class {
        job: args.job,
        class: args.class,
    };
    if let Reply::Done { message, .. } = ask(&args.socket.socket, &request)? {
        println!("{message}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_proto::api::MatrixEntryView;
    use cosched_proto::{Mode, Role};

    #[test]
    fn the_matrix_is_drawn_with_the_running_slice_marked() {
        let entry = |job, cpus: &str| MatrixEntryView {
            job,
            cpus: cpus.into(),
            role: Role::Own,
        };
        let m = MatrixView {
            procs: 4,
            processors: Vec::new(),
            mode: Mode::Gang,
            epoch_us: 0,
            quantum_us: 100_000,
            slot: 7,
            running_slice: Some(1),
            generation: 3,
            slices: vec![
                vec![entry(1, "0-1"), entry(2, "2-3")],
                vec![entry(3, "0-3")],
            ],
            queued: vec![4],
        };
        let text = render_matrix(&m);
        assert!(text.contains("  slice 0  1 1 2 2"), "{text}");
        assert!(text.contains("* slice 1  3 3 3 3"), "{text}");
        assert!(text.contains("queued: 4"), "{text}");
    }
}
