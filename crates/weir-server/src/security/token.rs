//! Tokens and roles: a token is a secret a client sends in its hello; the config stores only
//! its sha256 (hex), with the role it grants.
//!
//! Invariants:
//! - The table never holds a secret, only hashes; comparing hashes of equal length leaks
//!   nothing useful about the secret.
//! - An empty table means authentication is off: every connection is [`Principal::anonymous`]
//!   with every right, as before tokens existed (the loopback-only default).
//! - A reload never turns authentication off unless the reloaded config says so
//!   ([`Tokens::reload`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use weir_core::machine::Owner;

/// A token the node accepts: the sha256 (hex) of its secret, and the role it grants
/// (`admin`, `read` or `tenant:NAME`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub sha256: String,
    pub role: String,
}

/// What a token allows.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Everything, cluster changes, status digests and snapshot figures included.
    Admin,
    /// Every operation and read inside this tenant, nothing outside it.
    Tenant(String),
    /// Reads only, in any tenant.
    Read,
}

impl Role {
    /// Parses `admin`, `read` or `tenant:NAME`.
    pub fn parse(text: &str) -> Result<Role, String> {
        match text {
            "admin" => Ok(Role::Admin),
            "read" => Ok(Role::Read),
            _ => match text.strip_prefix("tenant:") {
                Some(name) if !name.is_empty() => Ok(Role::Tenant(name.to_owned())),
                _ => Err(format!(
                    "role {text:?} is not one of admin, read, tenant:NAME"
                )),
            },
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Role::Admin => f.write_str("admin"),
            Role::Tenant(t) => write!(f, "tenant:{t}"),
            Role::Read => f.write_str("read"),
        }
    }
}

/// Who a connection acts for: the hash of its token (its identity: sessions are bound to
/// it) and the role that token grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// sha256 hex of the token; empty for the anonymous principal.
    pub id: String,
    pub role: Role,
}

impl Principal {
    /// The principal of every connection when no tokens are configured.
    pub fn anonymous() -> Principal {
        Principal {
            id: String::new(),
            role: Role::Admin,
        }
    }

    /// What a session this principal opens records as its owner: sha256 of the id, or
    /// `None` for the anonymous principal (a session anyone may act on).
    pub fn owner(&self) -> Option<Owner> {
        (!self.id.is_empty()).then(|| Owner(Sha256::digest(self.id.as_bytes()).into()))
    }

    /// Whether this principal may act on a session whose owner is `owner`: an unowned
    /// session (opened without authentication) is anyone's, an owned one its owner's alone.
    pub fn may_act_on(&self, owner: Option<Owner>) -> bool {
        owner.is_none() || owner == self.owner()
    }
}

/// sha256 of `token`, lower-case hex: what the config stores.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The configured tokens, by hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenTable {
    roles: BTreeMap<String, Role>,
}

impl TokenTable {
    /// The table of `entries` (already validated by the config).
    pub fn new(entries: &[TokenEntry]) -> Result<TokenTable, String> {
        let mut roles = BTreeMap::new();
        for e in entries {
            check_hash(&e.sha256)?;
            roles.insert(e.sha256.to_ascii_lowercase(), Role::parse(&e.role)?);
        }
        Ok(TokenTable { roles })
    }

    /// Whether authentication is on.
    pub fn enabled(&self) -> bool {
        !self.roles.is_empty()
    }

    /// The principal a hello's token makes, or why the hello is refused.
    pub fn authenticate(&self, token: Option<&str>) -> Result<Principal, String> {
        if !self.enabled() {
            return Ok(Principal::anonymous());
        }
        let Some(token) = token else {
            return Err("this node requires a token: pass --token or set WEIR_TOKEN".into());
        };
        let id = hash_token(token);
        match self.roles.get(&id) {
            Some(role) => Ok(Principal {
                id,
                role: role.clone(),
            }),
            None => Err("the token is not recognized by this node".into()),
        }
    }

    /// Whether `principal` still holds its role here (after a reload).
    pub fn still_valid(&self, principal: &Principal) -> bool {
        if !self.enabled() {
            return principal.id.is_empty();
        }
        self.roles.get(&principal.id) == Some(&principal.role)
    }
}

/// The node's token table, shared by its connections and replaced on reload (SIGHUP).
/// A std lock: held only to look a hash up or swap the table, never across an await.
pub struct Tokens {
    table: std::sync::RwLock<TokenTable>,
    /// Bumped on every reload; each connection re-checks its principal then.
    reloaded: tokio::sync::watch::Sender<u64>,
}

impl Tokens {
    pub fn new(table: TokenTable) -> Tokens {
        Tokens {
            table: std::sync::RwLock::new(table),
            reloaded: tokio::sync::watch::channel(0).0,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, TokenTable> {
        self.table.read().unwrap_or_else(|p| p.into_inner())
    }

    /// See [`TokenTable::authenticate`].
    pub fn authenticate(&self, token: Option<&str>) -> Result<Principal, String> {
        self.read().authenticate(token)
    }

    /// See [`TokenTable::still_valid`].
    pub fn still_valid(&self, principal: &Principal) -> bool {
        self.read().still_valid(principal)
    }

    /// Replaces the table with a reloaded one, unless that would turn authentication off
    /// (tokens now, none in `table`) and `may_turn_off` is false: then the old table stays
    /// and the error says why. A reload never silently turns authentication off (docs/security.md).
    pub fn reload(&self, table: TokenTable, may_turn_off: bool) -> Result<(), String> {
        if self.read().enabled() && !table.enabled() && !may_turn_off {
            return Err(
                "the reloaded config has no tokens, which would turn authentication off and \
                 serve every tokenless client: refused, the old tokens stay (set \
                 reload_may_turn_auth_off = true in the config to allow it)"
                    .into(),
            );
        }
        self.replace(table);
        Ok(())
    }

    /// Replaces the table and tells every connection to re-check its principal.
    pub fn replace(&self, table: TokenTable) {
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = table;
        self.reloaded.send_modify(|n| *n += 1);
    }

    /// Changes on every [`Tokens::replace`].
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloaded.subscribe()
    }

    /// Resolves, with the reason, once a reload has taken `principal`'s token away; never
    /// while it stays (nor after the node drops its tokens at shutdown).
    pub fn revoked(
        self: &std::sync::Arc<Self>,
        principal: Principal,
    ) -> impl std::future::Future<Output = String> + Send + use<> {
        let tokens = self.clone();
        let mut reloads = self.reloads();
        async move {
            loop {
                if reloads.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
                if !tokens.still_valid(&principal) {
                    return format!("the token (role {}) was revoked", principal.role);
                }
            }
        }
    }
}

/// Refuses anything but 64 hex digits.
pub fn check_hash(hash: &str) -> Result<(), String> {
    if hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err(format!(
            "token hash {hash:?} is not 64 hex digits (make one with `weir token hash`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_and_tokens_authenticate_by_hash() {
        assert_eq!(Role::parse("tenant:a").unwrap(), Role::Tenant("a".into()));
        assert!(Role::parse("tenant:").is_err());
        assert!(Role::parse("root").is_err());
        let table = TokenTable::new(&[TokenEntry {
            sha256: hash_token("s3cret"),
            role: "read".into(),
        }])
        .unwrap();
        assert_eq!(table.authenticate(Some("s3cret")).unwrap().role, Role::Read);
        assert!(table.authenticate(Some("other")).is_err());
        assert!(
            table
                .authenticate(None)
                .unwrap_err()
                .contains("requires a token")
        );
        assert_eq!(
            hash_token("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// A reload that finds no tokens keeps the old ones unless the config allows turning
    /// authentication off; a reload to other tokens, or from none, is applied.
    #[test]
    fn a_reload_to_no_tokens_is_refused_unless_allowed() {
        let table = |secret: &str| {
            TokenTable::new(&[TokenEntry {
                sha256: hash_token(secret),
                role: "admin".into(),
            }])
            .unwrap()
        };
        let tokens = Tokens::new(table("old"));
        let reloads = tokens.reloads();
        let why = tokens.reload(TokenTable::default(), false).unwrap_err();
        assert!(why.contains("reload_may_turn_auth_off"), "{why}");
        assert!(
            tokens.authenticate(None).is_err(),
            "authentication stays on"
        );
        assert!(
            tokens.authenticate(Some("old")).is_ok(),
            "the old token stays"
        );
        assert!(
            !reloads.has_changed().unwrap(),
            "no connection is told of a reload"
        );
        tokens.reload(table("new"), false).unwrap();
        assert!(tokens.authenticate(Some("old")).is_err());
        assert!(tokens.authenticate(Some("new")).is_ok());
        tokens.reload(TokenTable::default(), true).unwrap();
        assert_eq!(tokens.authenticate(None).unwrap(), Principal::anonymous());
        tokens.reload(table("again"), false).unwrap();
        assert!(tokens.authenticate(None).is_err());
    }
}
