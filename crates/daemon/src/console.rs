//! The web console (`--http`, like `/metrics`): LLNL's `xgang` in a browser. The page and its
//! live part are HTML made here from the same typed views the socket answers with; a small
//! script of ours (`console.js`, no build step) swaps in the live part as the server sends it
//! (server-sent events) and posts actions.
//!
//! Looking is for anyone who can connect, as `ps` is. Acting needs a token: `cosched
//! console-token` asks the daemon for one over the Unix socket, whose peer credentials say who
//! asks, and the console sends it as `Authorization: Bearer`; an action then has exactly the
//! powers that user has on the socket. Tokens live in the daemon's memory only (one per user,
//! a new one replacing the old; a restart forgets them all).

use cosched_core::Micros;
use cosched_os::unix::Credentials;
use cosched_proto::api::{JobView, MatrixView, NodeView, StatsView};
use cosched_proto::Summary;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

pub const PAGE_SCRIPT: &str = include_str!("console/console.js");
pub const PAGE_STYLE: &str = include_str!("console/console.css");

/// Colours of jobs in the matrix (`.c0` to `.c11` in console.css; no inline style, which the
/// page's policy forbids).
const JOB_COLOURS: u64 = 12;

/// Bytes of randomness in a token (printed as hex).
const TOKEN_BYTES: usize = 16;

/// The console's tokens: who each one speaks for, by uid (one token a user).
#[derive(Default)]
pub struct Tokens {
    by_uid: Mutex<BTreeMap<u32, (String, Credentials)>>,
}

impl Tokens {
    /// A fresh token for `who` (their previous one stops working).
    pub fn issue(&self, who: &Credentials) -> std::io::Result<String> {
        let mut bytes = [0u8; TOKEN_BYTES];
        // SAFETY: getrandom(2) writes at most `bytes.len()` bytes into the buffer.
        let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
        if n != TOKEN_BYTES as isize {
            return Err(std::io::Error::last_os_error());
        }
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut tokens = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        tokens.insert(who.uid, (token.clone(), who.clone()));
        Ok(token)
    }

    /// Who `token` speaks for, if anyone. Every held token is compared in full, in constant
    /// time: a map keyed by token stops at the first differing byte, and how long a guess took
    /// would tell a caller how much of it was right.
    pub fn holder(&self, token: &str) -> Option<Credentials> {
        let tokens = self.by_uid.lock().unwrap_or_else(|p| p.into_inner());
        tokens
            .values()
            .fold(None, |found, (held, who)| {
                if equal_in_constant_time(held.as_bytes(), token.as_bytes()) {
                    Some(who)
                } else {
                    found
                }
            })
            .cloned()
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn equal_in_constant_time(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// What the console shows, taken under the state's lock at once.
pub struct Snapshot {
    pub now_us: Micros,
    /// The jobs listed, newest first, and how many unfinished ones are not.
    pub jobs: Vec<JobView>,
    pub hidden: usize,
    pub matrix: MatrixView,
    pub nodes: Vec<NodeView>,
    pub stats: StatsView,
}

/// Text made safe for HTML (a job's name and command are anyone's choosing).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if cosched_proto::api::unprintable(c) => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The whole page: the live part as it is now, and what updates it.
pub fn page(snapshot: &Snapshot) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>cosched console</title><link rel=\"stylesheet\" href=\"/console.css\">\
         <script src=\"/console.js\" defer></script></head><body>\
         <header><h1>cosched</h1><form id=\"token-form\"><label>token \
         <input id=\"token\" type=\"password\" autocomplete=\"off\" \
         placeholder=\"from: cosched console-token\"></label> <button type=\"submit\">use</button>\
         </form><p id=\"said\" role=\"status\">read-only: actions need a token \
         (<code>cosched console-token</code>)</p></header>\
         <main id=\"live\">{}</main></body></html>\n",
        live(snapshot)
    )
}

/// The part the server sends again as things change: clock, matrix, jobs, nodes, statistics.
pub fn live(s: &Snapshot) -> String {
    let mut out = String::new();
    let m = &s.matrix;
    let _ = write!(
        out,
        "<section id=\"clock\"><span>{} mode</span> <span>quantum {} ms</span> \
         <span>generation {}</span> <span id=\"slot\">slot {}</span> <span id=\"running\">{}</span></section>",
        m.mode.name(),
        m.quantum_us / 1000,
        m.generation,
        m.slot,
        match m.running_slice {
            Some(slice) => format!("slice {slice} running"),
            None => "nothing to run".into(),
        }
    );
    out.push_str(&matrix(m));
    out.push_str(&jobs(&s.jobs, s.hidden, s.now_us));
    out.push_str(&nodes(&s.nodes));
    out.push_str(&stats(&s.stats));
    out
}

/// Slices down, processors across; each cell the job placed there, coloured by job.
fn matrix(m: &MatrixView) -> String {
    let mut out = String::from("<section><h2>Matrix</h2><table id=\"matrix\"><tr><th></th>");
    for cpu in 0..m.procs as usize {
        match m.processors.get(cpu) {
            Some(name) => {
                let _ = write!(out, "<th>{}</th>", escape(name));
            }
            None => {
                let _ = write!(out, "<th>cpu {cpu}</th>");
            }
        }
    }
    out.push_str("</tr>");
    for (index, slice) in m.slices.iter().enumerate() {
        let running = m.running_slice == Some(index);
        let mut cells: Vec<Option<(u64, String)>> = vec![None; m.procs as usize];
        for entry in slice {
            for cpu in entry.processors() {
                if let Some(cell) = cells.get_mut(cpu) {
                    *cell = Some((entry.job, entry.role.to_string()));
                }
            }
        }
        let _ = write!(
            out,
            "<tr class=\"{}\" data-slice=\"{index}\"><th>{}slice {index}</th>",
            if running { "running" } else { "" },
            if running { "&#9654; " } else { "" }
        );
        for cell in cells {
            match cell {
                Some((job, role)) => {
                    let _ = write!(
                        out,
                        "<td class=\"job {role} c{}\" data-job=\"{job}\">{job}</td>",
                        job % JOB_COLOURS
                    );
                }
                None => out.push_str("<td></td>"),
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    if !m.queued.is_empty() {
        let queued: Vec<String> = m.queued.iter().map(u64::to_string).collect();
        let _ = write!(out, "<p>queued: {}</p>", queued.join(", "));
    }
    out.push_str("</section>");
    out
}

fn duration(us: i64) -> String {
    let s = us.max(0) / 1_000_000;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

fn jobs(jobs: &[JobView], hidden: usize, now_us: Micros) -> String {
    let mut out = String::from(
        "<section><h2>Jobs</h2><table id=\"jobs\"><tr><th>id</th><th>name</th><th>user</th>\
         <th>class</th><th>mode</th><th>state</th><th>CPUs</th><th>nodes</th><th>slices</th>\
         <th>elapsed</th><th>time left</th><th>suspended</th><th>exit</th><th>reason</th>\
         <th>act</th></tr>",
    );
    for job in jobs {
        let elapsed = job
            .started_us
            .map(|start| duration(job.ended_us.unwrap_or(now_us) - start))
            .unwrap_or_default();
        let exit = job.exit.map(|e| e.to_string()).unwrap_or_default();
        let slices: Vec<String> = job.slices.iter().map(usize::to_string).collect();
        let class = job.class.to_string();
        let state = job.state.name();
        let _ = write!(
            out,
            "<tr data-job=\"{id}\" data-state=\"{state}\"><td>{id}</td><td>{name}</td>\
             <td>{user}</td><td>{class}</td><td title=\"{why}\">{mode}</td>\
             <td class=\"state\">{state}</td><td>{cpus}</td>\
             <td>{nodes}</td><td>{slices}</td><td>{elapsed}</td><td>{left}</td><td>{suspended}</td>\
             <td>{exit}</td><td>{note}</td><td>",
            id = job.id,
            name = escape(&job.name),
            user = escape(&job.user),
            class = job.class,
            mode = job.mode_shown(),
            why = escape(job.mode_why.as_deref().unwrap_or("")),
            cpus = escape(job.cpus.as_deref().unwrap_or("")),
            nodes = job.node_count.map(|n| n.to_string()).unwrap_or_default(),
            slices = slices.join(","),
            suspended = if job.suspended_us > 0 {
                duration(job.suspended_us)
            } else {
                String::new()
            },
            left = match job.time_left_us() {
                Some(left) if !job.state.ended() => duration(left),
                _ => String::new(),
            },
            // Why it waits while it does; that it is stalled; why it ended without an exit
            // status once it has.
            note = match (job.reason, job.stalled_since_us) {
                (Some(reason), _) => reason.explained().to_string(),
                (None, Some(since)) => format!("stalled for {}", duration(now_us - since)),
                (None, None) => escape(job.note.as_deref().unwrap_or("")),
            },
        );
        if !job.state.ended() {
            for act in ["suspend", "resume", "cancel"] {
                let _ = write!(
                    out,
                    "<button data-act=\"{act}\" data-job=\"{}\">{act}</button>",
                    job.id
                );
            }
            let _ = write!(
                out,
                "<select data-class-of=\"{}\">{}</select><button data-act=\"class\" data-job=\"{}\">set class</button>",
                job.id,
                ["interactive", "batch", "standby", "express"]
                    .iter()
                    .map(|c| format!(
                        "<option{}>{c}</option>",
                        if *c == class { " selected" } else { "" }
                    ))
                    .collect::<String>(),
                job.id
            );
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</table>");
    if hidden > 0 {
        let _ = write!(
            out,
            "<p>{hidden} older unfinished jobs are not listed (<code>cosched ps</code> lists \
             them all)</p>"
        );
    }
    out.push_str("</section>");
    out
}

fn summary(s: &Summary) -> String {
    format!("{} / {} µs", s.p50, s.p99)
}

fn nodes(nodes: &[NodeView]) -> String {
    let mut out = String::from(
        "<section><h2>Nodes</h2><table id=\"nodes\"><tr><th>node</th><th>CPUs</th>\
         <th>scheduling</th><th>generation</th><th>lateness p50/p99</th>\
         <th>switch p50/p99</th><th>skew p50/p99</th><th>heard</th></tr>",
    );
    for node in nodes {
        let status = &node.status;
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{} ms ago</td></tr>",
            escape(&node.name),
            status.cpus,
            if node.left {
                "left"
            } else if status.scheduling {
                "yes"
            } else {
                "no"
            },
            status.generation.map(|g| g.to_string()).unwrap_or_default(),
            summary(&status.lateness_us),
            summary(&status.switch_us),
            summary(&status.skew_us),
            node.heard_ms_ago
        );
    }
    out.push_str("</table></section>");
    out
}

fn stats(s: &StatsView) -> String {
    format!(
        "<section><h2>Switching</h2><p id=\"stats\">actuator: {}; lateness {}; switch {}; \
         skew {}; missed slots {}; idle departures {}; jobs running {}, queued {}, ended {}</p></section>",
        escape(&s.actuator),
        summary(&s.lateness_us),
        summary(&s.switch_us),
        summary(&s.skew_us),
        s.missed_slots,
        s.idle_departures,
        s.jobs_running,
        s.jobs_queued,
        s.jobs_ended
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_proto::{ExitInfo, JobState};

    #[test]
    fn what_users_choose_cannot_become_markup() {
        assert_eq!(
            escape("<img src=x onerror='a()'>&\u{1b}"),
            "&lt;img src=x onerror=&#39;a()&#39;&gt;&amp;\u{fffd}"
        );
    }

    #[test]
    fn a_token_speaks_for_its_user_until_replaced() {
        let tokens = Tokens::default();
        let ana = Credentials {
            pid: 1,
            uid: 1000,
            gid: 1000,
            groups: vec![],
            limits: vec![],
        };
        let first = tokens.issue(&ana).unwrap();
        assert_eq!(first.len(), 2 * TOKEN_BYTES);
        assert_eq!(tokens.holder(&first).map(|c| c.uid), Some(1000));
        let second = tokens.issue(&ana).unwrap();
        assert_ne!(first, second);
        assert!(tokens.holder(&first).is_none());
        assert!(tokens.holder("").is_none());
        let mut one_off = second.clone().into_bytes();
        one_off[2 * TOKEN_BYTES - 1] ^= 1;
        assert!(tokens
            .holder(std::str::from_utf8(&one_off).unwrap())
            .is_none());
        assert!(tokens.holder(&second[..2 * TOKEN_BYTES - 1]).is_none());
    }

    #[test]
    fn an_end_shows_by_its_name_with_its_code_or_signal() {
        let ended = |id, state, exit| JobView {
            id,
            name: "solver".into(),
            uid: 0,
            user: "root".into(),
            class: cosched_core::Class::Batch,
            procs: 1,
            node_count: None,
            state,
            cpus: None,
            slices: Vec::new(),
            submitted_us: 0,
            started_us: Some(0),
            ended_us: Some(1_000_000),
            exit: Some(exit),
            argv: vec!["./solver".into()],
            argv_cut: false,
            note: None,
            suspended_us: 0,
            reason: None,
            time_limit_us: None,
            run_us: 1_000_000,
            mem_bytes: None,
            stalled_since_us: None,
            mode: cosched_proto::Mode::Gang,
            runs_as: None,
            mode_why: None,
        };
        let code = |code| ExitInfo {
            code: Some(code),
            signal: None,
        };
        let segv = ExitInfo {
            code: None,
            signal: Some(11),
        };
        let table = jobs(
            &[
                ended(1, JobState::Completed, code(0)),
                ended(2, JobState::Failed, code(3)),
                ended(3, JobState::Failed, segv),
            ],
            0,
            2_000_000,
        );
        for (id, state, exit) in [
            (1, "completed", "0"),
            (2, "failed", "3"),
            (3, "failed", "SIGSEGV"),
        ] {
            let row = table
                .split("<tr ")
                .find(|row| row.starts_with(&format!("data-job=\"{id}\"")))
                .unwrap_or_else(|| panic!("no row {id}: {table}"));
            assert!(row.contains(&format!("data-state=\"{state}\"")), "{row}");
            assert!(row.contains(&format!("<td>{exit}</td>")), "{row}");
        }
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(equal_in_constant_time(b"abc", b"abc"));
        assert!(equal_in_constant_time(b"", b""));
        assert!(!equal_in_constant_time(b"abc", b"abd"));
        assert!(!equal_in_constant_time(b"xbc", b"abc"));
        assert!(!equal_in_constant_time(b"abc", b"abcd"));
    }
}
