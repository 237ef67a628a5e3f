//! Fuzzing the request parser with proptest (runs in CI at the default 256 cases a property;
//! `PROPTEST_CASES=200000 cargo test -p cosched-proto --test request_fuzz` for a long run):
//! whatever bytes a client sends, the daemon answers with one line and never panics.

use cosched_proto::api::{parse_request, validate_run, Request};
use proptest::prelude::*;

/// Requests the daemon would take, as JSON text.
const VALID: [&str; 6] = [
    r#"{"op":"run","argv":["sh","-c","true"],"env":[["PATH","/bin"]],"cwd":"/tmp","procs":2}"#,
    r#"{"op":"wait","job":3,"stdio":true}"#,
    r#"{"op":"ps","all":true}"#,
    r#"{"op":"matrix"}"#,
    r#"{"op":"class","job":1,"class":"standby"}"#,
    r#"{"op":"cancel","job":18446744073709551615}"#,
];

/// What a request line leads to: a request that passed validation, or the one-line refusal.
fn answer(line: &[u8]) -> Result<Request, String> {
    let request = parse_request(line)?;
    if let Request::Run(run) = &request {
        validate_run(run)?;
    }
    Ok(request)
}

fn one_line(result: &Result<Request, String>) {
    if let Err(error) = result {
        assert!(!error.is_empty() && !error.contains('\n'), "{error:?}");
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_get_a_one_line_answer(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        one_line(&answer(&bytes));
    }

    #[test]
    fn mutated_requests_get_a_one_line_answer(
        which in 0..VALID.len(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..3u8), 1..8),
    ) {
        let mut bytes = VALID[which].as_bytes().to_vec();
        for (at, byte, kind) in edits {
            let at = at.index(bytes.len() + 1);
            match kind {
                0 => bytes.insert(at, byte),
                1 if at < bytes.len() => { bytes.remove(at); }
                _ if at < bytes.len() => bytes[at] = byte,
                _ => bytes.push(byte),
            }
        }
        one_line(&answer(&bytes));
    }

    #[test]
    fn hostile_run_fields_are_refused_or_valid(
        argv in proptest::collection::vec(".{0,12}", 0..4),
        env in proptest::collection::vec((".{0,6}", ".{0,6}"), 0..4),
        cwd in ".{0,12}",
        procs in any::<u32>(),
        name in proptest::option::of(".{0,80}"),
    ) {
        let request = serde_json::json!({
            "op": "run", "argv": argv, "env": env, "cwd": cwd, "procs": procs, "name": name,
        });
        let result = answer(request.to_string().as_bytes());
        one_line(&result);
        if let Ok(Request::Run(run)) = result {
            prop_assert!(!run.argv.is_empty() && run.procs > 0 && run.cwd.starts_with('/'));
            prop_assert!(run.argv.iter().chain([&run.cwd]).all(|s| !s.contains('\0')));
        }
    }
}

#[test]
fn an_escaped_newline_in_a_name_stays_escaped_in_the_answer() {
    // Found by the fuzzer in CI: serde quotes the decoded variant name.
    one_line(&answer(br#"{"op":"c\ncel","job":1}"#));
}

#[test]
fn the_valid_requests_are_valid() {
    for text in VALID {
        assert!(answer(text.as_bytes()).is_ok(), "{text}");
    }
}
