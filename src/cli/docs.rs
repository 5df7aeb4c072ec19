//! `weir completions SHELL` and `weir man`: generated from the clap table itself, so they
//! cannot drift from the commands.

use super::output::{EXIT_ERROR, EXIT_OK, Exit};

/// Prints the completion script for `shell`, of the command line `command` describes.
pub fn completions(shell: clap_complete::Shell, mut command: clap::Command) -> Exit {
    clap_complete::generate(shell, &mut command, "weir", &mut std::io::stdout());
    EXIT_OK
}

/// Prints the man page of the command line `command` describes, in roff.
pub fn man(command: clap::Command) -> Exit {
    let page = clap_mangen::Man::new(command);
    match page.render(&mut std::io::stdout()) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("weir man: {e}");
            EXIT_ERROR
        }
    }
}
