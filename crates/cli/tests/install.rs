//! `scripts/install` into a temporary prefix: the units it installs pass `systemd-analyze
//! verify` (their ExecStart binary and man pages exist there), every subcommand has a man
//! page, the completion scripts parse in bash, zsh and fish, and a site's own policy file is
//! kept by a second install.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn install(args: &[&str]) -> Output {
    Command::new(repo().join("scripts/install"))
        .args(["--binary", env!("CARGO_BIN_EXE_cosched")])
        .args(args)
        .output()
        .expect("running scripts/install")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A prefix of its own, removed when the test ends.
struct Prefix(PathBuf);

impl Prefix {
    fn new(name: &str) -> Prefix {
        let dir =
            std::env::temp_dir().join(format!("cosched-install-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Prefix(dir)
    }

    fn path(&self, rest: &str) -> PathBuf {
        self.0.join(rest)
    }

    fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The visible subcommands, as `cosched --help` lists them.
fn subcommands() -> Vec<String> {
    let help = Command::new(env!("CARGO_BIN_EXE_cosched"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let listed = help
        .split("Commands:\n")
        .nth(1)
        .expect("cosched --help lists its commands");
    listed
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn installed_units_verify_and_every_subcommand_has_a_man_page() {
    let prefix = Prefix::new("verify");
    let installed = install(&["--prefix", prefix.str()]);
    assert!(installed.status.success(), "{}", text(&installed));

    let units = prefix.path("lib/systemd/system");
    for unit in ["cosched.service", "cosched-agent.service"] {
        let body = std::fs::read_to_string(units.join(unit)).unwrap();
        assert!(
            body.contains(&format!("ExecStart={}/bin/cosched ", prefix.str())),
            "{unit} starts the installed binary:\n{body}"
        );
        assert!(
            body.contains("Type=notify") && body.contains("Delegate=yes"),
            "{body}"
        );
        assert!(!body.contains("/usr/local/bin"), "{body}");
        // `verify` runs `man` for Documentation=: the pages are found under the prefix.
        let verified = Command::new("systemd-analyze")
            .arg("verify")
            .arg(units.join(unit))
            .env("MANPATH", prefix.path("share/man"))
            .output()
            .expect("systemd-analyze (systemd) is installed");
        assert!(
            verified.status.success() && text(&verified).trim().is_empty(),
            "systemd-analyze verify {unit}:\n{}",
            text(&verified)
        );
    }

    let commands = subcommands();
    assert!(commands.len() > 10, "{commands:?}");
    for command in &commands {
        let page = match command.as_str() {
            "daemon" | "agent" => format!("share/man/man8/cosched-{command}.8"),
            _ => format!("share/man/man1/cosched-{command}.1"),
        };
        let page = prefix.path(&page);
        let body = std::fs::read_to_string(&page)
            .unwrap_or_else(|e| panic!("{command} has no man page ({}: {e})", page.display()));
        assert!(body.contains(".TH"), "{}", page.display());
    }
    assert!(prefix.path("share/man/man1/cosched.1").exists());
    // The pages render (groff is man's).
    let rendered = Command::new("man")
        .arg("-l")
        .arg(prefix.path("share/man/man1/cosched-run.1"))
        .env("MANPAGER", "cat")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&rendered.stdout).contains("--procs"),
        "{}",
        text(&rendered)
    );

    for (shell, file) in [
        ("bash", "share/bash-completion/completions/cosched"),
        ("zsh", "share/zsh/site-functions/_cosched"),
        ("fish", "share/fish/vendor_completions.d/cosched.fish"),
    ] {
        let script = prefix.path(file);
        let body = std::fs::read_to_string(&script).unwrap();
        assert!(
            body.contains("daemon") && body.contains("--procs"),
            "{file}"
        );
        let parsed = Command::new(shell)
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("{shell} (scripts/deps installs it): {e}"));
        assert!(
            parsed.status.success(),
            "{shell} -n {file}: {}",
            text(&parsed)
        );
    }

    // Examples where the site has none; the site's own files stay through a reinstall.
    let policy = prefix.path("etc/cosched/cosched.toml");
    assert!(policy.exists());
    std::fs::write(&policy, "# the site's\n").unwrap();
    let again = install(&["--prefix", prefix.str()]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), "# the site's\n");
    assert!(
        text(&again).contains("cosched.toml exists: kept"),
        "{}",
        text(&again)
    );
    let env = prefix.path("etc/cosched/agent.env");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(env).unwrap().permissions());
    assert_eq!(
        mode & 0o777,
        0o600,
        "agent.env may name secrets' paths: root's only"
    );
}

#[test]
fn a_staged_install_keeps_the_prefix_in_the_units() {
    let stage = Prefix::new("stage");
    let installed = install(&["--destdir", stage.str(), "--prefix", "/usr"]);
    assert!(installed.status.success(), "{}", text(&installed));
    let unit =
        std::fs::read_to_string(stage.path("usr/lib/systemd/system/cosched.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/cosched daemon"), "{unit}");
    assert!(
        unit.contains("EnvironmentFile=-/etc/cosched/cosched.env"),
        "{unit}"
    );
    assert!(stage.path("usr/bin/cosched").exists());
    assert!(stage.path("etc/cosched/cosched.toml").exists());
}

#[test]
fn bad_arguments_are_refused_in_one_line() {
    for (args, says) in [
        (
            &["--prefix", "relative/dir"][..],
            "--prefix must be an absolute path",
        ),
        (&["--prefix", "/opt/a b"][..], "--prefix may hold"),
        (&["--prefix"][..], "--prefix needs a value"),
        (&["--bogus"][..], "unknown argument '--bogus'"),
    ] {
        let refused = install(args);
        let said = text(&refused);
        assert!(!refused.status.success(), "{args:?}: {said}");
        assert_eq!(said.lines().count(), 1, "{args:?}: {said}");
        assert!(
            said.starts_with("scripts/install: ") && said.contains(says),
            "{args:?}: {said}"
        );
    }
}
