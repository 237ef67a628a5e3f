//! systemd's readiness protocol (`man 3 sd_notify`): one datagram of `KEY=VALUE` lines to the
//! socket in `$NOTIFY_SOCKET`, a path or, starting with '@', an abstract address. Written here
//! rather than linking libsystemd for one `sendto`.

use std::os::unix::net::UnixDatagram;

#[derive(Debug, thiserror::Error)]
#[error("NOTIFY_SOCKET={socket}: {source}")]
pub struct NotifyError {
    socket: String,
    source: std::io::Error,
}

/// Sends `state` (`READY=1`, `STATUS=...`, several lines at once) to the service manager;
/// `Ok(false)` when there is none (no `$NOTIFY_SOCKET`: not started by systemd as
/// `Type=notify`).
pub fn notify(state: &str) -> Result<bool, NotifyError> {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let socket = socket.to_string_lossy().into_owned();
    send(&socket, state)
        .map(|()| true)
        .map_err(|source| NotifyError { socket, source })
}

/// [`notify`], a failure logged as a warning: telling systemd is never worth stopping for.
pub fn notify_or_log(log: crate::Log, state: &str) {
    if let Err(error) = notify(state) {
        log.warn(error);
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    let sent = match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sender.send_to_addr(state.as_bytes(), &address)?
        }
        None if socket.starts_with('/') => sender.send_to(state.as_bytes(), socket)?,
        None => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "neither an absolute path nor an abstract address ('@NAME')",
            ))
        }
    };
    if sent != state.len() {
        return Err(std::io::Error::other(format!(
            "sent {sent} of {} bytes",
            state.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_and_an_abstract_address_both_receive() {
        let dir = std::env::temp_dir().join(format!("cosched-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1\nSTATUS=up").unwrap();
        let mut buffer = [0u8; 64];
        let n = receiver.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1\nSTATUS=up");
        std::fs::remove_dir_all(&dir).unwrap();

        use std::os::linux::net::SocketAddrExt;
        let name = format!("cosched-notify-test-{}", std::process::id());
        let address = std::os::unix::net::SocketAddr::from_abstract_name(&name).unwrap();
        let receiver = UnixDatagram::bind_addr(&address).unwrap();
        send(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = receiver.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"STOPPING=1");
        assert!(send("relative", "READY=1").is_err());
    }
}
