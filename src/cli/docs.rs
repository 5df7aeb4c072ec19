//! `weir completions SHELL` and `weir man`: generated from the clap table itself, so they
//! cannot drift from the commands.

use clap::CommandFactory;

use super::{Cli, EXIT_ERROR, EXIT_OK, Exit};

/// Prints the completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Exit {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "weir", &mut std::io::stdout());
    EXIT_OK
}

/// Prints the man page, in roff.
pub fn man() -> Exit {
    let page = clap_mangen::Man::new(Cli::command());
    match page.render(&mut std::io::stdout()) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("weir man: {e}");
            EXIT_ERROR
        }
    }
}
