//! The processes' log lines on stderr.

/// Writes `cosched WHO: MESSAGE` as one line. Messages quote what users sent (a host name, a
/// command, a path): a newline in one must not make a line of its own that reads as the
/// daemon's, so control characters are written escaped.
pub fn log_line(who: &str, message: impl std::fmt::Display) {
    eprintln!("cosched {who}: {}", one_line(&message.to_string()));
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`...).
pub fn one_line(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped = c.is_control().then(|| c.escape_default());
            escaped
                .into_iter()
                .flatten()
                .chain((!c.is_control()).then_some(c))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_cannot_forge_a_line() {
        assert_eq!(
            one_line("zz\ncosched daemon: job 4: root cancelled it\x1b[2K"),
            "zz\\ncosched daemon: job 4: root cancelled it\\u{1b}[2K"
        );
        assert_eq!(one_line("plain: ünïcode ok"), "plain: ünïcode ok");
    }
}
