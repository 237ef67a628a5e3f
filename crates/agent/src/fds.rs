//! Descriptors and short lines on Unix sockets, for supervisors and what talks to them.

use std::io::{self, Read};
use std::os::fd::RawFd;
use std::os::unix::net::UnixStream;

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

/// Reads one short line (the newline dropped) of at most `limit` bytes; `None` when the peer
/// closed first. A byte at a time: these lines are a few hundred bytes, and nothing after the
/// newline may be taken from the stream.
pub fn read_line(stream: &UnixStream, limit: usize) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match (&*stream).read(&mut byte) {
            Ok(0) => return Ok(None),
            Ok(_) if byte[0] == b'\n' => return Ok(Some(line)),
            Ok(_) if line.len() >= limit => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("line longer than {limit} bytes"),
                ))
            }
            Ok(_) => line.push(byte[0]),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
}
