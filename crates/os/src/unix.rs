//! Unix-socket plumbing the standard library lacks: peer credentials (`SO_PEERCRED`,
//! `SO_PEERGROUPS`), passing file descriptors (`SCM_RIGHTS`), reading one size-limited line,
//! and keeping descriptors from programs this process executes. Below the daemon and the
//! agent alike: both serve sockets, and supervisors speak lines.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Who is on the other end of a socket, as the kernel says (not as the peer claims).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// The resource limits a job this peer submits gets ([`crate::limits`]): read from the
    /// peer by the daemon when it submits one, empty otherwise (and in records made before:
    /// such a job gets the daemon's own, as every job did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limits: Vec<crate::limits::ResourceLimit>,
}

impl Credentials {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

pub fn peer_credentials(stream: &UnixStream) -> io::Result<Credentials> {
    let fd = stream.as_raw_fd();
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: `groups` holds `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(len as usize / 4);
    Ok(Credentials {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
        limits: Vec::new(),
        groups,
    })
}

/// SO_PEERPIDFD (Linux 6.5): a pidfd of the process that connected, taken when it did.
const SO_PEERPIDFD: libc::c_int = 77;

/// The connecting process as a pidfd: unlike its pid, it cannot come to name another
/// process once that one exits. Fails on kernels before 6.5.
pub fn peer_pidfd(stream: &UnixStream) -> io::Result<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 || fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel gave us this new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pidfd of process `pid` (Linux 5.3): it keeps naming that process, exited or not.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; the descriptor returned is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel gave us this new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process behind a pidfd (Linux 5.1): never to another that took its
/// pid since, unlike kill(2) of a pid read earlier. ESRCH once it has been reaped.
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid descriptor, no siginfo, no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the process behind a pidfd has exited (a pidfd polls readable then).
pub fn has_exited(pidfd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready != 0
}

/// Most descriptors one message may carry (a job's stdin, stdout and stderr).
pub const MAX_FDS: usize = 3;

/// Room for MAX_FDS descriptors (CMSG_SPACE(12) = 32 bytes): the kernel drops any more a
/// message carries and says so (MSG_CTRUNC), so no sender can fill this process's table.
const CMSG_SPACE: usize = 32;

/// Sends `bytes` with `fds` attached (to the first byte); the rest of `bytes` follows plainly.
pub fn send_with_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS);
    send_any_fds(stream, bytes, fds)
}

/// `send_with_fds` without the cap (a hostile sender, in tests).
fn send_any_fds(stream: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(!bytes.is_empty());
    // SAFETY: CMSG_SPACE only computes a size.
    let mut control =
        vec![0u8; unsafe { libc::CMSG_SPACE(std::mem::size_of_val(fds) as u32) } as usize];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call, and the
    // control buffer was sized for `fds`.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let data_len = std::mem::size_of_val(fds) as u32;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(data_len) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(cmsg).cast(), fds.len());
        }
        libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut rest = &bytes[sent as usize..];
    while !rest.is_empty() {
        // SAFETY: `rest` is a valid buffer.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        rest = &rest[n as usize..];
    }
    Ok(())
}

/// Receives some bytes into `buf` and any descriptors that came with them; `Ok(None)` when
/// the message carried more than MAX_FDS (the rest were dropped by the kernel).
fn recv_with_fds(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> io::Result<Option<usize>> {
    let mut control = [0u8; CMSG_SPACE];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as in send_with_fds; the kernel fills at most msg_controllen bytes, and every
    // descriptor it passes is new to this process, so owning it is sound.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() as _;
        let n = libc::recvmsg(stream.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((msg.msg_flags & libc::MSG_CTRUNC == 0).then_some(n as usize))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("the request is longer than {0} bytes")]
    TooLong(usize),
    #[error("the connection closed before a whole request arrived")]
    Truncated,
    #[error("no complete request within {0:?}; closing")]
    Deadline(std::time::Duration),
    #[error("a request carries at most {MAX_FDS} descriptors; closing")]
    TooManyDescriptors,
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// A line (without its newline) and the descriptors that came with it.
pub type Message = (Vec<u8>, Vec<OwnedFd>);

/// Reads one newline-terminated line of at most `limit` bytes (byte by byte past the newline
/// is never read), with any descriptors sent along. `Ok(None)` when the peer closed first. With
/// a `deadline`, the whole line must arrive within it, however the peer paces its bytes.
pub fn read_line_with_fds(
    stream: &UnixStream,
    limit: usize,
    within: Option<std::time::Duration>,
) -> Result<Option<Message>, LineError> {
    let deadline = within.map(|d| std::time::Instant::now() + d);
    let late = || LineError::Deadline(within.unwrap_or_default());
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            stream.set_read_timeout(Some(left))?;
        }
        // Peek first, so bytes after the newline stay for the next read.
        let mut ahead = [0u8; 4096];
        let available = loop {
            match peek(stream, &mut ahead) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if deadline.is_some() && e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(late())
                }
                other => break other?,
            }
        };
        if available == 0 {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(LineError::Truncated)
            };
        }
        let take = ahead[..available]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(available, |i| i + 1);
        // Checked at every message: what a connection holds stays bounded however it sends.
        let n = recv_with_fds(stream, &mut chunk[..take], &mut fds)?
            .filter(|_| fds.len() <= MAX_FDS)
            .ok_or(LineError::TooManyDescriptors)?;
        line.extend_from_slice(&chunk[..n]);
        let whole = line.last() == Some(&b'\n');
        if whole {
            line.pop();
        }
        // Checked on the last chunk too: a line's end may come in the chunk that passes the limit.
        if line.len() > limit {
            return Err(LineError::TooLong(limit));
        }
        if whole {
            return Ok(Some((line, fds)));
        }
    }
}

fn peek(stream: &UnixStream, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_PEEK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Reads one line without descriptors (replies, supervisor messages).
pub fn read_line(stream: &UnixStream, limit: usize) -> Result<Option<Vec<u8>>, LineError> {
    Ok(read_line_with_fds(stream, limit, None)?.map(|(line, _)| line))
}

/// Marks every descriptor from `first` on close-on-exec (Linux 5.11's close_range), so that
/// nothing this process holds reaches a program it executes. Async-signal-safe.
pub fn close_on_exec_from(first: RawFd) -> io::Result<()> {
    // SAFETY: close_range only changes descriptor flags.
    let rc = unsafe {
        libc::close_range(
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_int,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A new pipe, (read end, write end), closed on exec; `flags` adds to that (`O_NONBLOCK`).
pub fn pipe(flags: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut ends = [0; 2];
    // SAFETY: `ends` has room for the two descriptors.
    if unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC | flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) })
}

/// The signal set of `signals`.
pub fn signal_set(signals: &[libc::c_int]) -> libc::sigset_t {
    // SAFETY: a zeroed sigset_t is filled by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Drains and drops whatever a misbehaving peer sent, so closing does not reset the
/// connection before it reads our error reply.
pub fn drain(stream: &UnixStream) {
    let mut sink = [0u8; 4096];
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_millis(50)));
    let start = std::time::Instant::now();
    while start.elapsed() < std::time::Duration::from_secs(1)
        && matches!((&*stream).read(&mut sink), Ok(n) if n > 0)
    {}
}

/// The user's name from the password database, or the number.
pub fn user_name(uid: u32) -> String {
    let mut buffer = vec![0 as libc::c_char; 4096];
    // SAFETY: a zeroed passwd is valid; getpwuid_r writes within `buffer`.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut result = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut result,
        );
        if rc == 0 && !result.is_null() {
            return std::ffi::CStr::from_ptr(entry.pw_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    uid.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn null_fds(count: usize) -> (std::fs::File, Vec<RawFd>) {
        let null = std::fs::File::open("/dev/null").unwrap();
        let fds = vec![null.as_raw_fd(); count];
        (null, fds)
    }

    #[test]
    fn a_peers_pidfd_tells_when_the_peer_has_gone() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let alive = peer_pidfd(&ours).expect("Linux 6.5 or later");
        assert!(!has_exited(&alive), "this process is its own peer");
        // A process that connects and exits: its pid may be reused, its pidfd says it left.
        let dir = std::env::temp_dir().join(format!("cosched-pidfd-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = std::os::unix::net::UnixListener::bind(&dir).unwrap();
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
            ])
            .arg(&dir)
            .spawn()
            .unwrap();
        let (stream, _) = listener.accept().unwrap();
        let gone = peer_pidfd(&stream).unwrap();
        child.wait().unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert!(has_exited(&gone));
    }

    #[test]
    fn a_line_brings_at_most_max_fds_descriptors_however_they_are_sent() {
        let (_null, three) = null_fds(MAX_FDS);
        let (client, server) = UnixStream::pair().unwrap();
        send_with_fds(&client, b"{}\n", &three).unwrap();
        let (line, fds) = read_line_with_fds(&server, 100, None).unwrap().unwrap();
        assert_eq!((line.as_slice(), fds.len()), (&b"{}"[..], MAX_FDS));

        // Three at a time, a byte each: refused at the second message, not at the line's end.
        let (client, server) = UnixStream::pair().unwrap();
        for _ in 0..4 {
            send_with_fds(&client, b" ", &three).unwrap();
        }
        send_with_fds(&client, b"\n", &[]).unwrap();
        assert!(matches!(
            read_line_with_fds(&server, 100, None),
            Err(LineError::TooManyDescriptors)
        ));

        // Twelve in one message: the kernel keeps no more than there is room for.
        let (_null, twelve) = null_fds(12);
        let (client, server) = UnixStream::pair().unwrap();
        send_any_fds(&client, b"{}\n", &twelve).unwrap();
        assert!(matches!(
            read_line_with_fds(&server, 100, None),
            Err(LineError::TooManyDescriptors)
        ));
    }
}
