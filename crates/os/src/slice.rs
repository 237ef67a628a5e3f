//! A thread's time slice under Linux's fair scheduler (`sched_attr.sched_runtime`, Linux 6.12
//! on): how long a task that has its processor may keep it against one that wakes, however
//! much the queue owes the one waking (EEVDF protects the running task's slice). The kernel's
//! own is 0.7 ms x (1 + log2 of the processors, at most 8): 1.4 ms on 2 processors, 2.8 ms on
//! 8 or more, and its end is often noticed only at the next tick (4 ms at 250 Hz). A job's
//! processes hold their processors alone in their slot, so whoever else must run there (the
//! kernel threads finishing a job's block I/O, the agent, a supervisor) waits that long
//! behind them (docs/performance.md, "A job's time slice"). Children inherit the slice, and it
//! survives exec; older kernels ignore the field.

use std::io;

/// The kernel's bounds: it clamps a slice asked for to them (`sched_setattr(2)`).
pub const SHORTEST_US: u32 = 100;
pub const LONGEST_US: u32 = 100_000;

/// The kernel's `struct sched_attr` in its first version (`SCHED_ATTR_SIZE_VER0`): the
/// utilization clamps after it are not used.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

fn attributes() -> io::Result<SchedAttr> {
    let mut attr = SchedAttr::default();
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is that big.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut attr as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as libc::c_uint,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

/// Sets the calling thread's time slice, keeping its policy and nice value. Only system
/// calls: async-signal-safe, so a forked child may call it before exec.
pub fn set_time_slice(micros: u32) -> io::Result<()> {
    let mut attr = attributes()?;
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    attr.flags = 0;
    attr.runtime = u64::from(micros) * 1_000;
    // SAFETY: `attr` is a complete, initialized sched_attr of the size it states.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's time slice as the kernel reports it, in µs (0: a kernel that keeps
/// no slice of its own per task, before 6.12).
pub fn time_slice() -> io::Result<u64> {
    Ok(attributes()?.runtime / 1_000)
}

/// Whether this kernel gives a thread the slice it asks for: tried on a thread of its own,
/// which ends with it. `Err`: the slice it kept, in µs.
pub fn honoured(micros: u32) -> Result<(), u64> {
    std::thread::spawn(move || {
        let _ = set_time_slice(micros);
        match time_slice() {
            Ok(now) if now == u64::from(micros) => Ok(()),
            Ok(now) => Err(now),
            Err(_) => Err(0),
        }
    })
    .join()
    .unwrap_or(Err(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_the_slice_it_set_and_its_policy() {
        if honoured(SHORTEST_US).is_err() {
            eprintln!("skipped: this kernel keeps no time slice per task (Linux 6.12 on)");
            return;
        }
        std::thread::spawn(|| {
            let before = attributes().unwrap();
            set_time_slice(250).unwrap();
            assert_eq!(time_slice().unwrap(), 250);
            let after = attributes().unwrap();
            assert_eq!((after.policy, after.nice), (before.policy, before.nice));
        })
        .join()
        .unwrap();
    }
}
