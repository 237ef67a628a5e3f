//! Man pages and shell completions, generated from the command line's own definitions so they
//! never drift from it (`scripts/install` writes them; `cosched completions SHELL` prints one).

use anyhow::{Context, Result};
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::path::{Path, PathBuf};

/// Print a completion script for bash, zsh, fish, elvish or powershell
#[derive(Args)]
#[command(after_help = "Installed by scripts/install; by hand, for example:\n  \
cosched completions bash > /usr/share/bash-completion/completions/cosched\n  \
cosched completions zsh > /usr/share/zsh/vendor-completions/_cosched\n  \
cosched completions fish > /usr/share/fish/vendor_completions.d/cosched.fish")]
pub struct CompletionsArgs {
    /// The shell
    shell: Shell,
}

/// Writes the man pages, one per subcommand, into DIR/man1 and DIR/man8
#[derive(Args)]
pub struct ManPagesArgs {
    /// The directory (a share/man; created if absent): man1/cosched.1, man1/cosched-run.1,
    /// ..., man8/cosched-daemon.8, man8/cosched-agent.8
    dir: PathBuf,
}

/// The administrator's commands, in section 8 (system administration) as other daemons are.
const SECTION_8: [&str; 2] = ["daemon", "agent"];

pub fn completions(args: CompletionsArgs) -> Result<()> {
    let mut command = crate::Cli::command();
    clap_complete::generate(args.shell, &mut command, "cosched", &mut std::io::stdout());
    Ok(())
}

/// `cosched(1)` lists the subcommands; each visible one has its own page (`cosched-run(1)`).
pub fn man_pages(args: ManPagesArgs) -> Result<()> {
    let mut command = crate::Cli::command();
    command.build();
    write_page(&args.dir, "1", command.clone())?;
    // `help` is clap's own: `cosched(1)` covers it.
    let pages = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help");
    for sub in pages {
        let name = format!("cosched-{}", sub.get_name());
        let section = if SECTION_8.contains(&sub.get_name()) {
            "8"
        } else {
            "1"
        };
        write_page(
            &args.dir,
            section,
            sub.clone()
                .name(name.clone())
                .display_name(name.clone())
                .bin_name(format!("cosched {}", sub.get_name())),
        )?;
    }
    Ok(())
}

fn write_page(dir: &Path, section: &str, command: clap::Command) -> Result<()> {
    let dir = dir.join(format!("man{section}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{}.{section}", command.get_name()));
    let mut text = Vec::new();
    clap_mangen::Man::new(command)
        .section(section)
        .render(&mut text)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}
