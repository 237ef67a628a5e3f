//! The C library as a site installs it: `make install-lib` into a prefix of its own (the
//! versioned library, its links, the header, cosched.pc), a program built by
//! `pkg-config --cflags --libs cosched` alone, run against a daemon: it registers itself as a
//! job and asks its state.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// A tiny program, as a user would write it against the installed library.
const PROGRAM: &str = r#"
#include <cosched.h>
#include <stdio.h>
#include <unistd.h>

int main(void) {
    struct cosched_job_spec spec = {.procs = 1, .name = "pkg-config"};
    cosched_job_id job;
    char cpus[64], state[32];
    if (cosched_job_register(&spec, &job, cpus, sizeof cpus) != 0 ||
        cosched_proc_add(job, getpid()) != 0 ||
        cosched_job_state(job, state, sizeof state) != 0 || cosched_job_end(job) != 0) {
        fprintf(stderr, "%s\n", cosched_last_error());
        return 1;
    }
    printf("job %llu %s on %s\n", (unsigned long long)job, state, cpus);
    return 0;
}
"#;

fn ran(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_program_built_with_pkg_config_against_an_installed_copy_registers_with_the_daemon() {
    let d = Daemon::start(&["--allow-registration"]);
    let prefix = d.dir.join("prefix");
    ran(Command::new("make")
        .args(["-s", "-C"])
        .arg(repo().join("clients/c"))
        .arg("install-lib")
        .arg(format!("PREFIX={}", prefix.display())));
    let lib = prefix.join("lib");
    assert_eq!(
        std::fs::read_link(lib.join("libcosched.so.1")).unwrap(),
        Path::new("libcosched.so.1.0.0")
    );
    assert_eq!(
        std::fs::read_link(lib.join("libcosched.so")).unwrap(),
        Path::new("libcosched.so.1")
    );
    let pkg_config = |args: &[&str]| {
        text(&ran(Command::new("pkg-config")
            .args(args)
            .arg("cosched")
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))))
    };
    assert_eq!(pkg_config(&["--modversion"]), "1.0.0");
    let flags = pkg_config(&["--cflags", "--libs"]);
    assert!(flags.contains(&format!("-L{}", lib.display())), "{flags}");

    let source = d.dir.join("tiny.c");
    std::fs::write(&source, PROGRAM).unwrap();
    let program = d.dir.join("tiny");
    ran(Command::new("cc")
        .arg(&source)
        .arg("-o")
        .arg(&program)
        .args(flags.split_whitespace()));
    // It needs the library by its soname, found in the prefix.
    let dynamic = text(&ran(Command::new("readelf").arg("-d").arg(&program)));
    assert!(dynamic.contains("[libcosched.so.1]"), "{dynamic}");

    let out = ran(Command::new(&program)
        .env("COSCHED_SOCKET", d.socket())
        .env("LD_LIBRARY_PATH", &lib));
    let said = text(&out);
    let words: Vec<&str> = said.split_whitespace().collect();
    assert!(
        matches!(words[..], ["job", _, "running", "on", _]),
        "{said}\n{}",
        d.log()
    );
    let job: u64 = words[1].parse().unwrap();
    let end = d.wait_end(job, Duration::from_secs(20));
    assert_eq!(end["exit"]["code"].as_i64(), Some(0), "{end}");
}
