//! `weir limits apply FILE [--prune] [--dry-run]` and `weir limits export`: a tenant's
//! limits as a file.
//!
//! The file format is chosen by the file's extension ([`read`]): `.toml` is Weir's own
//! ([`LimitsFile`]); another format plugs in as one more arm there, returning the same
//! definitions. Export writes Weir's TOML, so `export` then `apply` changes nothing: every
//! field a definition has is written, `burst` resolved, and floats exactly (TOML keeps a
//! f64's shortest round-trip form).
//!
//! ```toml
//! [limits.db]
//! concurrent = 3
//!
//! [limits.api]
//! per_second = 10.0
//! burst = 20
//! keyed = true
//! keys_max = 1000
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{EXIT_ERROR, EXIT_OK, EXIT_USAGE, Exit, Output, answered, refused};
use weir_client::Client;
use weir_core::machine::{Definition, LimitStatus, LimitsChange};

#[derive(Subcommand, Debug)]
pub enum LimitsCommand {
    /// Set the tenant's limits to a file's, in one entry (all or nothing).
    Apply {
        /// The file (`.toml`: `[limits.NAME]` tables of concurrent, per_second, burst,
        /// keyed, keys_max, shadow).
        file: PathBuf,
        /// Also remove the tenant's limits the file does not name.
        #[arg(long)]
        prune: bool,
        /// Print the change without making it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the tenant's limits as a file `apply` takes.
    Export,
}

/// Weir's limits file: the tenant's limits by name.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    #[serde(default)]
    pub limits: BTreeMap<String, FileSpec>,
}

/// One limit in the file: the fields of `weir limit define`, each optional.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileSpec {
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub concurrent: u32,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub per_second: f64,
    pub burst: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub keyed: bool,
    pub keys_max: Option<u32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

/// The definitions of `tenant` in the file at `path`, in the format its extension names.
pub fn read(path: &Path, tenant: &str) -> Result<Vec<Definition>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file: LimitsFile = match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?,
        other => {
            return Err(format!(
                "{}: unknown limits file format {other:?} (known: .toml)",
                path.display()
            ));
        }
    };
    Ok(file.definitions(tenant))
}

impl LimitsFile {
    /// The file's limits as definitions of `tenant`, by name.
    pub fn definitions(self, tenant: &str) -> Vec<Definition> {
        let limits = self.limits.into_iter();
        limits
            .map(|(name, s)| Definition {
                tenant: tenant.to_owned(),
                name,
                concurrent: s.concurrent,
                per_second: s.per_second,
                burst: s.burst,
                keyed: s.keyed || s.keys_max.is_some(),
                keys_max: s.keys_max,
                shadow: s.shadow,
            })
            .collect()
    }

    /// The file of these limits (removed ones left out: they are gone once released).
    pub fn of(limits: &[LimitStatus]) -> LimitsFile {
        let spec = |l: &LimitStatus| FileSpec {
            concurrent: l.concurrent,
            per_second: l.per_second,
            burst: Some(l.burst),
            keyed: l.keys_max.is_some(),
            keys_max: l.keys_max,
            shadow: l.shadow,
        };
        let live = limits.iter().filter(|l| !l.removing);
        LimitsFile {
            limits: live.map(|l| (l.name.clone(), spec(l))).collect(),
        }
    }
}

/// The change as text: one line per kind that has names.
fn change_text(c: &LimitsChange, dry_run: bool) -> String {
    let verb = if dry_run { "would be " } else { "" };
    let lines = [
        ("created", &c.created),
        ("changed", &c.changed),
        ("removed", &c.removed),
        ("unchanged", &c.unchanged),
    ];
    let mut out: Vec<String> = lines
        .iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(kind, names)| format!("{verb}{kind}: {}", names.join(", ")))
        .collect();
    if c.is_empty() {
        out.push("no change".into());
    }
    out.join("\n")
}

pub async fn run(command: &LimitsCommand, tenant: &str, client: &Client, out: &Output) -> Exit {
    match command {
        LimitsCommand::Apply {
            file,
            prune,
            dry_run,
        } => {
            let definitions = match read(file, tenant) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return EXIT_USAGE;
                }
            };
            let applied = client.apply_limits(tenant, definitions, *prune, *dry_run);
            match answered(applied.await) {
                Ok(Ok(c)) => {
                    let value = json!({"created": c.created, "changed": c.changed,
                        "removed": c.removed, "unchanged": c.unchanged, "applied": !dry_run});
                    out.print(value, || change_text(&c, *dry_run));
                    EXIT_OK
                }
                Ok(Err(refusal)) => refused(&refusal),
                Err(code) => code,
            }
        }
        LimitsCommand::Export => match answered(client.limits(tenant).await) {
            Ok(limits) => match toml::to_string(&LimitsFile::of(&limits)) {
                Ok(text) => {
                    print!("{text}");
                    EXIT_OK
                }
                Err(e) => {
                    eprintln!("weir: export: {e}");
                    EXIT_ERROR
                }
            },
            Err(code) => code,
        },
    }
}
