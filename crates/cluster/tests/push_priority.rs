//! The leader's push writes its frames at real-time priority (as root): at ordinary priority
//! each frame written woke an agent's thread that took the processor from the writer, and a
//! header reached the last of 1,000 agents on 2 CPUs after all the others had run.

use cosched_cluster::Pusher;
use std::time::{Duration, Instant};

/// The scheduling policy of each thread of this process named `name`.
fn policies(name: &str) -> Vec<i32> {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .filter_map(|task| task.file_name().to_str()?.parse::<libc::pid_t>().ok())
        // SAFETY: no memory is passed; a thread ended meanwhile gives -1, left out.
        .map(|tid| unsafe { libc::sched_getscheduler(tid) })
        .filter(|&policy| policy >= 0)
        .map(|policy| policy & !libc::SCHED_RESET_ON_FORK)
        .collect()
}

#[test]
fn the_push_writer_runs_at_real_time_priority() {
    cosched_os::require_root("the push writer's real-time priority");
    let _pusher = Pusher::start("127.0.0.1:0".parse().unwrap()).unwrap();
    let began = Instant::now();
    // The writer makes itself real-time as it starts, which may be after `start` returns.
    while policies("cosched-push-ou") != [libc::SCHED_FIFO] {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the push writer's policies: {:?} (SCHED_FIFO is {})",
            policies("cosched-push-ou"),
            libc::SCHED_FIFO
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
