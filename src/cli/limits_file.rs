//! `weir limits apply FILE [--prune] [--dry-run]` and `weir limits export`: a tenant's
//! limits as a file.
//!
//! The file format is chosen by the file's extension ([`read`]): `.toml` is Weir's own
//! ([`LimitsFile`]); `.yaml` or `.yml` is envoyproxy/ratelimit's configuration, compiled by
//! [`ratelimit_yaml`] into one limit per descriptor node of its `domain`, which is the
//! tenant (a `--tenant` other than the default naming another tenant is refused, naming
//! both). Export writes Weir's TOML, so `export` then `apply` changes nothing: every
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
use weir_core::bounds::{APPLY_COMMAND_BYTES_MAX, APPLY_DEFINITIONS_MAX};
use weir_core::machine::{Command, Definition, LimitStatus, LimitsChange};

pub mod ratelimit_yaml;

#[derive(Subcommand, Debug)]
pub enum LimitsCommand {
    /// Set the tenant's limits to a file's, in one entry (all or nothing).
    Apply {
        /// The file (`.toml`: `[limits.NAME]` tables of concurrent, per_second, burst,
        /// keyed, keys_max, shadow; `.yaml`/`.yml`: an envoyproxy/ratelimit configuration,
        /// whose `domain` is the tenant).
        file: PathBuf,
        /// Also remove the tenant's limits the file does not name.
        #[arg(long)]
        prune: bool,
        /// Print the change without making it.
        #[arg(long)]
        dry_run: bool,
        /// For a ratelimit file: the live keys of its keyed limits, `N` for every one, or
        /// `NAME=N` for one (its name escaped or as the file wrote it, e.g.
        /// `envoy:path=/v1=50000`); repeatable. Without it a limit keeps the bound it has,
        /// and a new one gets 100,000.
        #[arg(long, value_name = "N|NAME=N")]
        keys_max: Vec<String>,
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

/// Largest limits file `weir limits apply` reads, in bytes: one apply carries at most
/// `APPLY_DEFINITIONS_MAX` (256) definitions in at most `APPLY_COMMAND_BYTES_MAX` (128 KiB),
/// and a limit is a few lines of a file, so 1 MiB holds any file one apply can take with
/// room for comments. Read no further than this (a device such as /dev/urandom never ends),
/// and a larger file is refused before it is parsed.
pub const LIMITS_FILE_BYTES_MAX: u64 = 1 << 20;

/// The text of the limits file at `path`, read no further than [`LIMITS_FILE_BYTES_MAX`].
fn read_bounded(path: &Path) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(LIMITS_FILE_BYTES_MAX + 1).read_to_end(&mut bytes))
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > LIMITS_FILE_BYTES_MAX {
        return Err(format!(
            "larger than {LIMITS_FILE_BYTES_MAX} bytes, the bound of a limits file (one apply \
             takes at most {APPLY_DEFINITIONS_MAX} limits): nothing was applied; split it"
        ));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text: nothing was applied".into())
}

/// Refuses, before anything is sent, what one `ApplyLimits` cannot carry: more than
/// `APPLY_DEFINITIONS_MAX` definitions or more than `APPLY_COMMAND_BYTES_MAX` encoded, with
/// a message that says nothing was applied.
fn fits_one_apply(tenant: &str, definitions: &[Definition], prune: bool) -> Result<(), String> {
    if definitions.len() > APPLY_DEFINITIONS_MAX {
        return Err(format!(
            "the file defines {} limits; one apply takes at most {APPLY_DEFINITIONS_MAX}: \
             nothing was applied; split the file (and apply the parts without --prune)",
            definitions.len()
        ));
    }
    let bytes = weir_core::codec::encode(&Command::ApplyLimits {
        tenant: tenant.to_owned(),
        definitions: definitions.to_vec(),
        prune,
    })
    .len();
    if bytes > APPLY_COMMAND_BYTES_MAX {
        return Err(format!(
            "the file's limits encode in {bytes} bytes; one apply carries at most \
             {APPLY_COMMAND_BYTES_MAX}: nothing was applied; split the file"
        ));
    }
    Ok(())
}

/// The tenant and its definitions in the file at `path`, in the format its extension names.
/// `tenant` is the command line's; a ratelimit file names its own (its `domain`), and
/// `tenant_given` says whether the command line named one that must agree.
pub fn read(
    path: &Path,
    tenant: &str,
    tenant_given: bool,
    keys_max: &ratelimit_yaml::KeysMax,
) -> Result<(String, Vec<Definition>), String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let text = read_bounded(path).map_err(|e| at(&e))?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("toml") if keys_max.file.is_some() || !keys_max.of.is_empty() => Err(at(
            &"--keys-max is for a ratelimit file; a .toml file gives each limit's keys_max",
        )),
        Some("toml") => {
            let file: LimitsFile = toml::from_str(&text).map_err(|e| at(&e))?;
            Ok((tenant.to_owned(), file.definitions(tenant)))
        }
        Some("yaml" | "yml") => {
            let file = ratelimit_yaml::parse(&text).map_err(|e| at(&e))?;
            if tenant_given && file.domain != tenant {
                return Err(at(&format_args!(
                    "the file's domain {:?} is its tenant, but --tenant names {tenant:?}",
                    file.domain
                )));
            }
            let definitions = file.compile_with(keys_max).map_err(|e| at(&e))?;
            Ok((file.domain, definitions))
        }
        other => Err(at(&format_args!(
            "unknown limits file format {other:?} (known: .toml, .yaml, .yml)"
        ))),
    }
}

/// The domain of the ratelimit file at `path`, if it is one that reads (a file that does
/// not is reported by [`read`]).
fn ratelimit_domain(path: &Path) -> Option<String> {
    let yaml = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    );
    if !yaml {
        return None;
    }
    let text = read_bounded(path).ok()?;
    ratelimit_yaml::parse(&text).ok().map(|f| f.domain)
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

/// `--keys-max` values: `N` for the file, `NAME=N` for one limit (split at the last `=`,
/// so a name may hold `=` as the file wrote it).
pub fn keys_max_flags(flags: &[String]) -> Result<ratelimit_yaml::KeysMax, String> {
    let mut keys_max = ratelimit_yaml::KeysMax::default();
    for flag in flags {
        let number = |text: &str| {
            text.parse::<u32>()
                .map_err(|e| format!("--keys-max {flag:?}: {text:?} is not a count: {e}"))
        };
        match flag.rsplit_once('=') {
            Some((name, n)) => {
                keys_max.of.insert(name.to_owned(), number(n)?);
            }
            None => keys_max.file = Some(number(flag)?),
        }
    }
    Ok(keys_max)
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
            keys_max,
        } => {
            // The global `--tenant` defaults to `default`: only another name must agree
            // with a ratelimit file's domain.
            let tenant_given = tenant != "default";
            let mut keys_max = match keys_max_flags(keys_max) {
                Ok(k) => k,
                Err(e) => {
                    eprintln!("weir: {e}");
                    return EXIT_USAGE;
                }
            };
            if let Some(domain) = ratelimit_domain(file) {
                // What the domain's limits have now, kept where no flag says otherwise.
                match answered(client.limits(&domain).await) {
                    Ok(limits) => {
                        keys_max.now = limits
                            .iter()
                            .filter_map(|l| Some((l.name.clone(), l.keys_max?)))
                            .collect();
                    }
                    Err(code) => return code,
                }
            }
            let (tenant, definitions) = match read(file, tenant, tenant_given, &keys_max)
                .and_then(|(t, d)| fits_one_apply(&t, &d, *prune).map(|()| (t, d)))
            {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("weir: {}", super::output::escaped(&e));
                    return EXIT_USAGE;
                }
            };
            let applied = client.apply_limits(&tenant, definitions, *prune, *dry_run);
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
