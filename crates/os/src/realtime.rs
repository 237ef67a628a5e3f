//! Real-time priority (SCHED_FIFO) for the few threads whose lateness is what cosched sells,
//! and their order: the slot clock first, then what feeds it, then the leader's push. A
//! real-time thread runs before every ordinary one (a job's spinning processes, and on the
//! bench machine a thousand agents); among them the higher priority goes first, so an agent's
//! clock never waits for the push of a controller sharing its node.

/// The slot clock: freezes and thaws at the boundaries.
pub const CLOCK_PRIORITY: i32 = 50;
/// The agent's orders' thread, below the clock's: the two share locks (a channel's), and one
/// of them held by a thread that busy jobs preempt kept the clock waiting for milliseconds.
pub const ORDERS_PRIORITY: i32 = 40;
/// The agent's reader of its jobs' I/O counters, which the clock waits for at a boundary (a
/// thread of ordinary priority waited behind the jobs' processes, milliseconds every time).
pub const IO_READS_PRIORITY: i32 = 45;
/// The agent's kickers (`cosched_agent::kick`): the lowest real-time priority, above every
/// ordinary process, which is all a kick must preempt, and below all the agent's own threads.
pub const KICK_PRIORITY: i32 = 1;
/// The leader's push writer: a header written to every agent in one pass, not one agent
/// between every two preemptions by the processes of the leader's node.
pub const PUSH_PRIORITY: i32 = 30;

/// Puts the calling thread at SCHED_FIFO `priority`. Without it a thaw can return 30 ms to a
/// second late with the CPUs busy (notes): the caller should say so when this fails.
/// With SCHED_RESET_ON_FORK: a process started from this thread must not inherit real-time
/// priority (a spinning job would own a CPU, and the v1 cpu controller refuses real-time
/// tasks into a group with no real-time budget: EINVAL on `cgroup.procs`).
pub fn make_realtime(priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is valid; 0 means the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK, &param) }
        == 0
    {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
