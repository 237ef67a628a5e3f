//! `cosched launch-remote`: what an MPI launcher runs instead of ssh, inside a job on a cluster
//! node. It asks its node's agent (through the door the agent named in `COSCHED_AGENT`) for a
//! process of the same job on another node, waits until that process ends and exits with its
//! status, as ssh would.

use anyhow::{bail, Context, Result};
use clap::Args;
use cosched_os::unix;
use cosched_proto::{Ending, ProcessRequest};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

/// Start a process of this job on another node of the cluster, in place of ssh
#[derive(Args)]
#[command(
    long_about = "Start a process of this job on another node of the cluster, in place of ssh, \
and wait for it. It runs only inside a cosched job on a cluster node: the node's agent sets \
COSCHED_AGENT (its socket) and COSCHED_JOB_ID, checks that the caller is a process of that \
job, and the controller checks that the job holds processors on HOST. The process runs there \
in the job's cgroup, as the job's user, with the job's environment, and its output goes to \
the job's output file on that node. The exit status is the process's (255 when it could not \
start, as ssh).",
    after_help = "Open MPI (the agent sets this for every job of a cluster, and cosched sets \
the hosts as OMPI_MCA_orte_default_dash_host, so a plain `mpirun -np N prog` spans the job's \
nodes):\n  OMPI_MCA_plm_rsh_agent=\"cosched launch-remote\"\n\
MPICH (Hydra takes one executable, so the agent makes the link cosched-launch-remote beside \
cosched and sets HYDRA_LAUNCHER=rsh and HYDRA_LAUNCHER_EXEC to it for every job of a \
cluster):\n  mpiexec.hydra -hosts $COSCHED_HOSTS -n N prog\n\n\
The words after HOST are joined with spaces and run by `/bin/sh -c`, as sshd does."
)]
pub struct LaunchRemoteArgs {
    /// The node: its address or its name, as the launcher's host list gives it
    host: String,
    /// The command, as shell words
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

const ENDING_LIMIT: usize = 64 << 10;

/// The remote process's exit status (255 when it could not start).
pub fn launch_remote(args: LaunchRemoteArgs) -> Result<i32> {
    let door = std::env::var_os(cosched_agent::door::DOOR_ENV)
        .map(PathBuf::from)
        .with_context(|| {
            format!(
                "{} is not set: launch-remote runs inside a cosched job on a cluster node \
                 (the node's agent sets it)",
                cosched_agent::door::DOOR_ENV
            )
        })?;
    let job = std::env::var("COSCHED_JOB_ID")
        .ok()
        .and_then(|j| j.parse().ok())
        .context("COSCHED_JOB_ID is not set to a job number: run this inside a cosched job")?;
    let stream = UnixStream::connect(&door)
        .with_context(|| format!("cannot reach this node's agent at {}", door.display()))?;
    let peer = unix::peer_credentials(&stream)
        .with_context(|| format!("{}: whose socket is it", door.display()))?;
    if peer.uid != 0 {
        bail!(
            "{} is served by uid {}, not by root's cosched agent; refusing to use it",
            door.display(),
            peer.uid
        );
    }
    let request = ProcessRequest {
        job,
        host: args.host.clone(),
        command: args.command.join(" "),
    };
    let mut line = serde_json::to_vec(&request)?;
    line.push(b'\n');
    // An agent that refuses at once may close before the request is written: its reason is
    // still there to read (the write's "Broken pipe" says nothing).
    let written = (&stream).write_all(&line);
    let ending: Ending = match unix::read_line(&stream, ENDING_LIMIT) {
        Ok(Some(line)) => {
            serde_json::from_slice(&line).context("the agent's answer is not understood")?
        }
        _ if written.is_err() => {
            return Err(written.unwrap_err())
                .with_context(|| format!("asking the agent at {}", door.display()))
        }
        Ok(None) => bail!(
            "the agent at {} closed the connection before the process on {} ended (did it stop?)",
            door.display(),
            args.host
        ),
        Err(error) => bail!("waiting for the process on {}: {error}", args.host),
    };
    if let Some(note) = &ending.note {
        note!("cosched launch-remote: {}: {note}", args.host);
    }
    Ok(ending.exit.shell_status())
}
