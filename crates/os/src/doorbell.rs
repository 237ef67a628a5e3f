//! A descriptor other threads ring (an eventfd): a thread that waits in `poll` on a socket can
//! wait on a channel too, its senders ringing after each send. So one thread reads a
//! connection and its other inputs, where a reader thread of its own would be one more wakeup
//! per message.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

#[derive(Debug)]
pub struct Doorbell(OwnedFd);

/// What a [`Doorbell::wait`] found ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    pub rung: bool,
    /// The other descriptor can be read, or has ended or failed (a read says which).
    pub other: bool,
}

impl Doorbell {
    pub fn new() -> io::Result<Doorbell> {
        // SAFETY: no pointers; the descriptor returned is owned here alone.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        Ok(Doorbell(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Wakes the waiter (or its next wait, which then returns at once).
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: eight readable bytes. Full (2^64 - 2 rings unanswered) is still rung.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Unrings it: rings from now on wake the next wait.
    fn answer(&self) {
        let mut count = [0u8; 8];
        // SAFETY: eight writable bytes; not rung, the read fails at once (non-blocking).
        unsafe { libc::read(self.0.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }

    /// Waits up to `within` for a ring or for `other` to be readable; the doorbell is
    /// answered if it was rung.
    pub fn wait(&self, other: Option<RawFd>, within: Duration) -> io::Result<Ready> {
        let watch = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [watch(self.0.as_raw_fd()), watch(other.unwrap_or(-1))];
        let timeout = libc::timespec {
            tv_sec: within.as_secs() as libc::time_t,
            tv_nsec: within.subsec_nanos() as libc::c_long,
        };
        let count = if other.is_some() { 2 } else { 1 };
        // SAFETY: `fds` holds `count` entries and `timeout` is a valid timespec; no mask.
        let found = unsafe { libc::ppoll(fds.as_mut_ptr(), count, &timeout, std::ptr::null()) };
        if found < 0 {
            let error = io::Error::last_os_error();
            return match error.kind() {
                io::ErrorKind::Interrupted => Ok(Ready::default()),
                _ => Err(error),
            };
        }
        let ready = Ready {
            rung: fds[0].revents != 0,
            other: count == 2 && fds[1].revents != 0,
        };
        if ready.rung {
            self.answer();
        }
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_from_another_thread_or_before_the_wait_wakes_it_once() {
        let bell = Arc::new(Doorbell::new().unwrap());
        bell.ring();
        bell.ring();
        let short = Duration::from_millis(20);
        assert!(bell.wait(None, short).unwrap().rung);
        assert_eq!(
            bell.wait(None, short).unwrap(),
            Ready::default(),
            "answered"
        );
        let ringer = Arc::clone(&bell);
        let ringing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ringer.ring();
        });
        let began = Instant::now();
        assert!(bell.wait(None, Duration::from_secs(30)).unwrap().rung);
        assert!(began.elapsed() < Duration::from_secs(20));
        ringing.join().unwrap();
    }

    #[test]
    fn the_other_descriptor_readable_or_closed_is_ready() {
        let bell = Doorbell::new().unwrap();
        let (mut near, far) = std::os::unix::net::UnixStream::pair().unwrap();
        let fd = Some(far.as_raw_fd());
        let short = Duration::from_millis(20);
        assert_eq!(bell.wait(fd, short).unwrap(), Ready::default());
        near.write_all(b"x").unwrap();
        let ready = bell.wait(fd, short).unwrap();
        assert!(ready.other && !ready.rung);
        drop(near);
        assert!(bell.wait(fd, short).unwrap().other);
    }
}
