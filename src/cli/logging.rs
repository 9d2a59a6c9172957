//! Logging for every command: to stderr, filtered by `RUST_LOG` (else a
//! default per kind of command), in colour only on a terminal and never
//! with `NO_COLOR` (<https://no-color.org>).

use std::io::IsTerminal as _;

/// Log format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The default filter of the daemons (`run`, `cluster`, `cluster-bench`):
/// info, but not kube-client's own line per failed request
/// (`kube_client::client::builder`, at ERROR, five a second against a
/// server that is down): berth's watches and writers report each failure
/// themselves, once per change of state, naming what failed and the next
/// attempt's delay. `RUST_LOG=kube_client=debug` brings them back.
pub const DAEMON: &str = "info,kube_client::client::builder=off";

/// The default filter of the commands that print a result (`explain`,
/// `simulate`, `dump`): warnings only. Notes, such as an optional API the
/// server does not serve, are at debug (`RUST_LOG=debug`).
pub const OFFLINE: &str = "warn,kube_client::client::builder=off";

/// Whether log lines may carry colour codes: stderr is a terminal and
/// `NO_COLOR` is unset or empty.
pub fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Initializes logging once (later calls do nothing): `RUST_LOG` when set,
/// else `default`.
pub fn init(format: Format, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let b = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour());
    let _ = match format {
        Format::Json => b.json().try_init(),
        Format::Text => b.try_init(),
    };
}
