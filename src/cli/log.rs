//! Logging for `weir serve`: `tracing` to stderr, filtered by `RUST_LOG` (default `info`),
//! with the node id on every line. openraft's per-RPC failure lines are dropped whatever the
//! filter: the peer transport logs a peer's going and coming back once each instead
//! (`weir_server::raft::peer_health`).

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::format::{DefaultFields, Format, Full, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;
use weir_server::raft::peer_health::is_peer_rpc_failure;

/// The default format with `node=ID` in front of every line.
struct NodeTagged {
    id: u64,
    inner: Format<Full>,
}

impl<S, N> FormatEvent<S, N> for NodeTagged
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "node={} ", self.id)?;
        self.inner.format_event(ctx, writer, event)
    }
}

/// Installs the subscriber (once per process; later calls do nothing).
pub fn init(id: u64) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .fmt_fields(DefaultFields::new())
        .event_format(NodeTagged {
            id,
            inner: Format::default(),
        })
        .with_filter(filter_fn(|meta| !is_peer_rpc_failure(meta)));
    // `RUST_LOG`'s filter is global, so a span or event it disables is never made: openraft
    // marks a span on every step of its hot paths, and a filter of the line layer alone
    // would leave the registry making (and closing) each of them, whatever it printed.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .try_init();
}

/// Installs a subscriber for a client command (not `serve`), only when `RUST_LOG` is set:
/// the client library's trace of its failure detector, reconnects and keep-alives (the
/// `client` module doc) is then on stderr, each line naming its module. Without `RUST_LOG` a
/// client command prints nothing but its own output.
pub fn init_client() {
    let Ok(filter) = EnvFilter::try_from_default_env() else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true)
        .try_init();
}
