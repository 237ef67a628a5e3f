//! What a Slurm user types on day one, against a real daemon (needs root, as CI runs): output
//! patterns opened as the user, ends told apart (completed, failed with its code or signal,
//! cancelled), `ps` and `cancel` choosing jobs as squeue and scancel do, `run` without `--`
//! and `-n`, the queued and allocated notes, and the job's task count, node list and host file.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const PATIENCE: Duration = Duration::from_secs(60);

fn text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn stdout(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn host() -> String {
    text(Path::new("/proc/sys/kernel/hostname"))
        .trim()
        .to_string()
}

#[test]
fn ends_are_told_apart_and_output_patterns_are_filled_in() {
    let d = Daemon::start(&["--procs", "2"]);
    // No `--`, no `-n`: one processor.
    let out = d.cosched(&["run", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    let dir = d.dir.display().to_string();
    let pattern = format!("{dir}/out-%j-%x-%u-%N-100%%.log");
    let three = job_id(d.cosched(&[
        "run",
        "--detach",
        "--name",
        "three",
        "--output",
        &pattern,
        "--error",
        &format!("{dir}/err-%j.log"),
        "sh",
        "-c",
        "echo to-out; echo to-err >&2; exit 3",
    ]));
    let ended = d.wait_end(three, PATIENCE);
    assert_eq!(
        (&ended["state"], &ended["exit"]["code"]),
        (&"failed".into(), &3.into()),
        "{ended}"
    );
    let named = d
        .dir
        .join(format!("out-{three}-three-root-{}-100%.log", host()));
    assert_eq!(text(&named), "to-out\n");
    assert_eq!(text(&d.dir.join(format!("err-{three}.log"))), "to-err\n");
    // No temporary file is left behind.
    let strays: Vec<_> = std::fs::read_dir(&d.dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".cosched-"))
        .collect();
    assert!(strays.is_empty(), "{strays:?}");

    // A blocking run of a job killed by SIGSEGV: failed, the signal named, 128 + 11.
    let log = format!("{dir}/segv.log");
    let out = d.cosched(&["run", "--output", &log, "sh", "-c", "kill -SEGV $$"]);
    assert_eq!(out.status.code(), Some(139), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("failed: killed by SIGSEGV"), "{said}");
    let segv = d.json(&["ps", "--all", "--json", "-t", "failed"]);
    let segv = segv
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["exit"]["signal"] == 11)
        .cloned()
        .unwrap_or_else(|| panic!("no failed job killed by signal 11: {segv}"));
    let listed = stdout(&d.cosched(&[
        "ps",
        "--all",
        "--noheader",
        "--format",
        "id,state,exit",
        &segv["id"].to_string(),
        &three.to_string(),
    ]));
    let rows: Vec<Vec<&str>> = listed
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec![segv["id"].to_string().as_str(), "failed", "SIGSEGV"],
            vec![three.to_string().as_str(), "failed", "3"],
        ],
        "{listed}"
    );
    let completed = stdout(&d.cosched(&["ps", "--all", "-t", "completed", "--format", "state"]));
    assert_eq!(completed, "STATE\ncompleted\n");
    let history = stdout(&d.cosched(&["history", "--state", "failed", "--swf"]));
    assert!(history.lines().any(|l| !l.starts_with(';')), "{history}");

    // Truncated by default, appended to with --open-mode append.
    let fixed = d.dir.join("fixed.log");
    std::fs::write(&fixed, "old old old\n").unwrap();
    let fixed_s = fixed.to_str().unwrap();
    assert!(d
        .cosched(&["run", "-o", fixed_s, "echo", "new"])
        .status
        .success());
    assert_eq!(text(&fixed), "new\n");
    let append = [
        "run",
        "-o",
        fixed_s,
        "--open-mode",
        "append",
        "echo",
        "more",
    ];
    assert!(d.cosched(&append).status.success());
    assert_eq!(text(&fixed), "new\nmore\n");

    // A pattern with an unknown field is refused before anything runs.
    refused(
        &d.cosched(&["run", "-o", "out-%A.log", "true"]),
        "'%A' in output pattern",
    );
}

#[test]
fn output_files_are_opened_with_the_users_rights_only() {
    let d = Daemon::start(&["--procs", "2"]);
    let victim = d.dir.join("roots-file");
    std::fs::write(&victim, "root's\n").unwrap();
    let open = d.dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let link = open.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    for target in ["/etc/cosched-habits-test", link.to_str().unwrap()] {
        let out = d.cosched_as(NOBODY, &["run", "--output", target, "true"]);
        refused(&out, "opening the job's output file");
    }
    assert!(!Path::new("/etc/cosched-habits-test").exists());
    assert_eq!(text(&victim), "root's\n");
    // With %j the file is made in the directory as nobody: refused where nobody may not.
    let out = d.cosched_as(NOBODY, &["run", "--output", "/etc/x-%j.log", "true"]);
    refused(&out, "creating the job's output file in /etc");
    // The default name has no directory: the one it is made in is named (it read "in :").
    let out = d.cosched_as(NOBODY, &["run", "--detach", "true"]);
    refused(&out, "creating the job's output file in /:");
}

#[test]
fn ps_and_cancel_choose_jobs_by_id_user_name_and_state() {
    let d = Daemon::start(&["--procs", "2", "--mpl", "1"]);
    let log = d.dir.join("jobs.out");
    let long_name = "a-name-longer-than-twelve";
    let first = d.submit_to(&log, &["--name", long_name, "sleep", "300"]);
    let second = d.submit_to(&log, &["--name", "other", "sleep", "300"]);
    wait_until(PATIENCE, || d.job(second)["state"] == "running");
    // Uncut when piped; -n picks by name.
    let by_name = stdout(&d.cosched(&["ps", "-n", long_name, "--format", "id,name"]));
    let rows: Vec<Vec<&str>> = by_name
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let first_s = first.to_string();
    assert_eq!(
        rows,
        [vec!["ID", "NAME"], vec![first_s.as_str(), long_name]],
        "{by_name}"
    );
    let ids = |args: &[&str]| -> Vec<u64> {
        let mut all = vec!["ps", "--noheader", "--format", "id"];
        all.extend_from_slice(args);
        stdout(&d.cosched(&all))
            .lines()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    };
    assert_eq!(ids(&["-u", "root", "-t", "running"]), [first, second]);
    assert_eq!(ids(&["-j", &format!("{second}")]), [second]);
    assert_eq!(
        ids(&[&first.to_string(), &second.to_string()]),
        [first, second]
    );
    assert!(ids(&["-u", "nobody"]).is_empty());
    // A malformed command line: the argument parser's status, 2.
    let out = d.cosched(&["ps", "-t", "done"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown job state 'done'"));

    // A blocking run that cannot start says it is queued and why, then where it started.
    let waiting = Command::new(COSCHED)
        .args([
            "run",
            "-n",
            "2",
            "--output",
            log.to_str().unwrap(),
            "sleep",
            "3",
        ])
        .env("COSCHED_SOCKET", d.socket())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(PATIENCE, || {
        d.json(&["ps", "--json"]).as_array().unwrap().len() == 3
    }));

    // Nobody may cancel root's jobs: each refusal named, exit 1, the jobs untouched.
    let out = d.cosched_as(NOBODY, &["cancel", "-u", "root", "-t", "running"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("job {first}:")), "{said}");
    assert!(said.contains(&format!("job {second}:")), "{said}");
    assert_eq!(d.job(first)["state"], "running");
    refused(&d.cosched(&["cancel"]), "name the jobs");
    // Nothing left to cancel is no failure, as with scancel.
    let out = d.cosched_as(NOBODY, &["cancel", "-u", "nobody"]);
    assert!(out.status.success(), "{out:?}");

    let out = d.cosched(&["cancel", &first.to_string(), &second.to_string()]);
    assert!(out.status.success(), "{out:?}");
    for job in [first, second] {
        assert_eq!(d.wait_end(job, PATIENCE)["state"], "cancelled");
    }
    let out = waiting.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("queued and waiting: waiting for processors (resources)"),
        "{said}"
    );
    assert!(
        said.contains("has been allocated resources: CPUs 0-1"),
        "{said}"
    );
}

#[test]
fn jobs_know_their_tasks_nodes_and_host_file() {
    let d = Daemon::start(&["--procs", "2"]);
    let script =
        "echo $COSCHED_NTASKS $COSCHED_NODELIST; cat $COSCHED_HOSTFILE; echo $COSCHED_HOSTFILE";
    // As nobody: the file is root's, readable by the job's user.
    let out = d.cosched_as(NOBODY, &["run", "-n", "2", "sh", "-c", script]);
    let shown = stdout(&out);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 3, "{shown}");
    assert_eq!(lines[0], format!("2 {}", host()));
    assert_eq!(lines[1], format!("{} slots=2", host()));
    let hostfile = Path::new(lines[2]);
    assert!(hostfile.starts_with(d.state_dir()), "{shown}");
    // Gone once the job's end is stored.
    assert!(
        wait_until(PATIENCE, || !hostfile.exists()),
        "{} left behind",
        hostfile.display()
    );
}
