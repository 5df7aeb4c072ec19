//! The README's Rust examples (section "The client library", the blocks tagged
//! ```` ```rust readme-example ````): the four examples every Weir client's README shows — a
//! permit held while work runs, a keyed take, a several-part request, a loss noticed —
//! compiled here as the modules below and run in order against a real three-node cluster,
//! each followed by a read of what it left behind. The README shows each module's source as
//! it is, less its `//!` line; a difference fails `the_readme_shows_the_compiled_examples`.

mod held;
mod keyed_take;
mod loss;
mod parts;

use std::path::Path;

use crate::ELECTION;
use crate::harness::{Cluster, phase};
use weir_client::Client;

/// Each example's file (under `tests/cluster/readme_library/`) and source, in README order.
const EXAMPLES: [(&str, &str); 4] = [
    ("held.rs", include_str!("readme_library/held.rs")),
    (
        "keyed_take.rs",
        include_str!("readme_library/keyed_take.rs"),
    ),
    ("parts.rs", include_str!("readme_library/parts.rs")),
    ("loss.rs", include_str!("readme_library/loss.rs")),
];

/// The README's ```` ```rust readme-example ```` blocks, in order.
fn readme_blocks() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(path).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for line in text.lines() {
        match open.as_mut() {
            Some(block) if line.trim_start().starts_with("```") => {
                blocks.push(std::mem::take(block));
                open = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None if line.trim() == "```rust readme-example" => open = Some(String::new()),
            None => {}
        }
    }
    assert!(open.is_none(), "README.md: a rust block is never closed");
    blocks
}

/// What the README shows of an example's source: all but its leading `//!` lines and the
/// blank line after them.
fn shown(source: &str) -> &str {
    let mut rest = source;
    while let Some(line_end) = rest.find('\n') {
        if !rest.starts_with("//!") {
            break;
        }
        rest = &rest[line_end + 1..];
    }
    rest.strip_prefix('\n').unwrap_or(rest)
}

#[test]
fn the_readme_shows_the_compiled_examples() {
    let blocks = readme_blocks();
    assert_eq!(
        blocks.len(),
        EXAMPLES.len(),
        "README.md: ```rust readme-example blocks"
    );
    for (i, (block, (file, source))) in blocks.iter().zip(EXAMPLES).enumerate() {
        assert_eq!(
            block.as_str(),
            shown(source),
            "README.md's Rust example {} is not tests/cluster/readme_library/{file}",
            i + 1
        );
    }
}

#[test]
fn shown_drops_the_module_doc_only() {
    assert_eq!(shown("//! a\n//! b\n\nuse x;\n//! c\n"), "use x;\n//! c\n");
    assert_eq!(shown("use x;\n"), "use x;\n");
}

/// Units in use on `examples/name`.
async fn in_use(client: &Client, name: &str) -> u64 {
    let status = client.limit_status("examples", name).await.unwrap();
    status.unwrap_or_else(|| panic!("{name} undefined")).in_use
}

/// Tokens in the bucket of `key` of `examples/name`.
async fn key_tokens(client: &Client, name: &str, key: &str) -> u64 {
    let status = client.key_status("examples", name, key).await.unwrap();
    status.unwrap_or_else(|| panic!("{name} not keyed")).tokens
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_examples_run_against_a_cluster() {
    let cluster = Cluster::start("readme-library", 3, "");
    cluster.leader(ELECTION).await;
    let servers = cluster.servers();
    let client = cluster.client();

    phase("a permit held while work runs");
    held::permit_held_while_work_runs(servers.clone())
        .await
        .expect("example 1");
    assert_eq!(in_use(&client, "db").await, 0, "the permit was released");

    phase("a keyed take");
    keyed_take::keyed_take(servers.clone())
        .await
        .expect("example 2");
    // Ten a minute: no token comes back within the test.
    assert_eq!(key_tokens(&client, "per-user", "alice").await, 0);
    assert_eq!(key_tokens(&client, "per-user", "bob").await, 1);

    phase("a several-part request");
    parts::several_parts(servers.clone())
        .await
        .expect("example 3");
    assert_eq!(in_use(&client, "db").await, 0, "refused: nothing charged");

    phase("a loss noticed");
    loss::loss_noticed(servers).await.expect("example 4");
    assert_eq!(in_use(&client, "deploy").await, 0);
    assert!(client.halts("examples").await.unwrap().is_empty());
}
