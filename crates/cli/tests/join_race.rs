//! The pid-reuse race of `proc_add`, forced rather than hoped for: `nobody` asks for its own
//! child to join its registered job, then kills and reaps that child while the agent is
//! between its checks and the move (`COSCHED_DELAY=joining:MS` widens that window, as a
//! loaded machine does), and a root process is born with the freed pid at once (the test
//! sets `ns_last_pid`, where an audit needed a busy root service and few free pids). Before
//! the agent held the process for the move, the root process was moved into nobody's job (and
//! then out to the root cgroups): its cgroups must be the ones it was born in. Needs root.

mod common;

use common::*;
use std::process::Command;

/// nobody's side: prints `freed PID` once its child is killed and reaped, then the join's
/// outcome.
const NOBODY_SCRIPT: &str = r#"
import os, threading, time, cosched
client = cosched.Client()
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
job = client.register(1, join_within_s=30).job
outcome = {}
def join():
    try:
        outcome["join"] = client.proc_add(job, child)
    except Exception as error:
        outcome["join"] = "refused: %s" % error
asking = threading.Thread(target=join)
asking.start()
time.sleep(0.15)
os.kill(child, 9)
os.waitpid(child, 0)
print("freed", child, flush=True)
asking.join()
print(outcome["join"], flush=True)
client.job_end(job)
"#;

#[test]
fn a_pid_reused_during_a_join_never_takes_another_users_process() {
    let d = Daemon::start_with(
        &["--quantum-ms", "100", "--allow-registration"],
        &[("COSCHED_DELAY", "joining:400")],
        None,
    );
    let mut reused = 0;
    for _attempt in 0..8 {
        let (mut nobody, mut lines) = nobody_python(&d, NOBODY_SCRIPT);
        let freed: i32 = lines
            .next()
            .and_then(Result::ok)
            .and_then(|line| line.strip_prefix("freed ")?.parse().ok())
            .unwrap_or_else(|| panic!("nobody's script said nothing\n{}", d.log()));
        // Root's side: the next process made on the machine gets the freed pid.
        std::fs::write("/proc/sys/kernel/ns_last_pid", (freed - 1).to_string()).unwrap();
        let mut root = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = root.id() as i32;
        let born_in = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let outcome = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(nobody.wait().unwrap().success(), "{outcome}\n{}", d.log());
        let now_in = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        root.kill().unwrap();
        root.wait().unwrap();
        if pid != freed {
            // Something else on the machine took the pid first: this attempt proves nothing.
            continue;
        }
        reused += 1;
        assert_eq!(
            now_in,
            born_in,
            "root's process {pid}, born with the pid of nobody's joining child, was moved \
             (join: {outcome})\n{}",
            d.log()
        );
        assert!(outcome.contains("exited while joining"), "{outcome}");
        if reused == 3 {
            break;
        }
    }
    assert!(
        reused > 0,
        "no attempt got the freed pid for root's process"
    );
}

/// nobody's side: its child's exec is stuck for good (a thread of it traced by the script,
/// which never waits for it), so no one can seize the child; prints the join's outcome, then
/// holds the deadlock while the test runs a job.
const STUCK_EXEC_SCRIPT: &str = r#"
import ctypes, os, sys, threading, time, cosched
libc = ctypes.CDLL(None, use_errno=True)
client = cosched.Client()
r, w = os.pipe()
child = os.fork()
if child == 0:
    def sit():
        os.write(w, b"%d\n" % threading.get_native_id())
        time.sleep(600)
    threading.Thread(target=sit, daemon=True).start()
    time.sleep(0.5)
    os.execv("/bin/sleep", ["sleep", "600"])
tid = int(os.read(r, 64).split()[0])
if libc.ptrace(0x4206, tid, None, None) != 0:
    print("no seize", ctypes.get_errno(), flush=True)
    sys.exit(1)
time.sleep(1)
job = client.register(1, join_within_s=30).job
began = time.time()
try:
    print("join:", client.proc_add(job, child), flush=True)
except Exception as error:
    print("refused:", error, flush=True)
print("child %d took %.1f" % (child, time.time() - began), flush=True)
sys.stdin.read()
client.job_end(job)
"#;

#[test]
fn a_join_whose_process_cannot_be_held_never_stalls_the_clock() {
    let d = Daemon::start(&["--quantum-ms", "100", "--allow-registration"]);
    let (mut nobody, mut lines) = nobody_python(&d, STUCK_EXEC_SCRIPT);
    let outcome = lines.next().and_then(Result::ok).unwrap_or_default();
    let took = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        outcome.contains("could not be held for the move"),
        "{outcome} ({took})\n{}",
        d.log()
    );
    // The exec is still stuck (nobody's script holds it): jobs still run to their end.
    let out = d.cosched(&["run", "-n", "1", "--", "true"]);
    assert!(out.status.success(), "{out:?}\n{}", d.log());
    drop(nobody.stdin.take());
    nobody.wait().unwrap();
    let child: i32 = took
        .split_whitespace()
        .nth(1)
        .and_then(|pid| pid.parse().ok())
        .unwrap();
    unsafe { libc::kill(child, libc::SIGKILL) };
}
