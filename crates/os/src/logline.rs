//! The processes' log lines on stderr, each with its level: journald's `<N>` syslog priority
//! when stderr is the journal (systemd sets `JOURNAL_STREAM`), else a word a person reads.

use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

/// How much a line matters to an administrator (the syslog priorities journald files it by).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Something failed: a job or the process is affected.
    Error,
    /// Something is wrong or degraded and cosched carries on (retries, drops, falls back).
    Warning,
    /// What happened: start, stop, each job's submission, start and end.
    Info,
    /// Detail for whoever debugs cosched.
    Debug,
}

impl Level {
    /// The syslog priority (`man 3 syslog`) journald reads from a `<N>` prefix.
    fn priority(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warning => 4,
            Level::Info => 6,
            Level::Debug => 7,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// Where a process's lines come from (`cosched daemon: ...`), written at a level.
#[derive(Clone, Copy, Debug)]
pub struct Log(&'static str);

impl Log {
    pub const fn new(who: &'static str) -> Log {
        Log(who)
    }

    pub fn error(self, message: impl fmt::Display) {
        log_line(self.0, Level::Error, message);
    }

    pub fn warn(self, message: impl fmt::Display) {
        log_line(self.0, Level::Warning, message);
    }

    pub fn info(self, message: impl fmt::Display) {
        log_line(self.0, Level::Info, message);
    }

    pub fn debug(self, message: impl fmt::Display) {
        log_line(self.0, Level::Debug, message);
    }
}

/// Writes one line: `<6>cosched WHO: MESSAGE` to the journal, `cosched WHO: info: MESSAGE`
/// elsewhere. Messages quote what users sent (a host name, a command, a path): a newline in
/// one must not make a line of its own that reads as the process's, so control characters are
/// written escaped. A line stderr cannot take is dropped: `eprintln!` panicked there, and a
/// daemon whose log reader went away (`2>&1 | tee` ended, the journal's stream closed) died at
/// its next line, on whichever thread wrote it (the slot clock's too).
pub fn log_line(who: &str, level: Level, message: impl fmt::Display) {
    let line = format_line(journal(), who, level, &message.to_string());
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn format_line(journal: bool, who: &str, level: Level, message: &str) -> String {
    let message = one_line(message);
    if journal {
        format!("<{}>cosched {who}: {message}", level.priority())
    } else {
        format!("cosched {who}: {}: {message}", level.word())
    }
}

/// Whether stderr is the journal: systemd sets `JOURNAL_STREAM` to the stream's `DEV:INODE`,
/// which a process compares with its stderr (a child whose stderr was redirected inherits the
/// variable but not the stream). Decided once.
fn journal() -> bool {
    static JOURNAL: OnceLock<bool> = OnceLock::new();
    *JOURNAL.get_or_init(|| {
        let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
            return false;
        };
        // SAFETY: `stat` is a plain struct that fstat fills; zeroed is a valid value.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd 2 may be closed; fstat then fails and nothing is read.
        if unsafe { libc::fstat(2, &mut stat) } != 0 {
            return false;
        }
        stream.to_str() == Some(&format!("{}:{}", stat.st_dev, stat.st_ino))
    })
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

    #[test]
    fn the_journal_gets_priorities_and_a_terminal_words() {
        for (journal, who, level, message, line) in [
            (
                true,
                "daemon",
                Level::Warning,
                "x\n<3>y",
                "<4>cosched daemon: x\\n<3>y",
            ),
            (true, "agent", Level::Debug, "d", "<7>cosched agent: d"),
            (
                false,
                "daemon",
                Level::Error,
                "e",
                "cosched daemon: error: e",
            ),
            (false, "agent", Level::Info, "i", "cosched agent: info: i"),
        ] {
            assert_eq!(format_line(journal, who, level, message), line);
        }
    }
}
