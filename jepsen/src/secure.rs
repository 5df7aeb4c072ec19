//! `--secure`: the run's cluster with TLS on every port and tokens with roles, the clients
//! that dial it, and the check at the start that it really refuses the rest.
//!
//! - [`Secure::generate`] makes a CA and one certificate per node (`DevCa`, as `weir certs
//!   init` does, but each node's certificate also names that node's own addresses: in
//!   namespace mode they are not loopback ones, and a client verifies the host it dialed),
//!   writes them under `<out>/tls/`, and draws a random secret per token: one `admin`, one
//!   `read`, and one `tenant:NAME` for each tenant in [`TENANTS`]. Configs get the sha256
//!   of each secret, never the secret; the secrets stay in this process (and in the
//!   environment of the client processes the nemesis spawns).
//! - [`Secure::apply`] puts `[tls]` and `[[tokens]]` into a node's config, and turns
//!   `insecure` off: with TLS on, a non-loopback address needs no exception.
//! - [`client`] and [`security`]: what every workload, probe and the nemesis dial with,
//!   each with the least role its ops need ([`Access`]). Without `--secure` they are
//!   plaintext and tokenless, as before.
//! - [`check`], at the start of a run: on every node, a plaintext connect to the client
//!   port, a hello without a token, a hello with an unknown token, a tenant token asking for
//!   the node's status, a plaintext HTTP request and an HTTPS request without a bearer
//!   token must each be refused (the token refusals with their clear errors), while the
//!   admin token over TLS is served on both ports (the control: a dead node refuses
//!   everything). It records one `security` op; `checker/security.rs` judges it.
//!
//! Invariant: a process runs one cluster, so the security in force is process-wide: set
//! once by [`install`] before the first client dials, read by every dial after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use weir_client::Client;
use weir_proto::protocol::{Failure, Request, Response};
use weir_proto::tls::{ClientSecurity, Connector};
use weir_server::config::{Config, TlsFiles, TokenEntry};
use weir_server::security::certs::{DevCa, Validity};
use weir_server::security::hash_token;

use crate::history::{self, Kind, Recorder};
use crate::setup::{TENANT, TENANTS};

/// The role a client needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Status, digests, membership changes (the monitor, the convergence probe, the heal),
    /// and the operator's controls over a tenant: limit definitions, halts, ceilings.
    Admin,
    /// Reads only: the fence readers, the final reads.
    Read,
    /// Everything inside one tenant (one of [`TENANTS`]).
    Tenant(&'static str),
}

/// A secure run's files and secrets.
pub struct Secure {
    /// The CA every node's certificate chains to: what clients verify against.
    pub ca: PathBuf,
    /// Node `id`'s files at `id - 1`.
    files: Vec<TlsFiles>,
    /// The secret of each role (`admin`, `read`, `tenant:NAME`).
    secrets: BTreeMap<String, String>,
    /// TLS verified against [`Secure::ca`].
    connector: Connector,
}

/// A fresh random secret, hex.
fn secret() -> Result<String, String> {
    let (a, b) = (
        weir_server::security::random_u64()?,
        weir_server::security::random_u64()?,
    );
    Ok(format!("{a:016x}{b:016x}"))
}

/// The role name a token of `access` carries in a config.
pub fn role(access: Access) -> String {
    match access {
        Access::Admin => "admin".into(),
        Access::Read => "read".into(),
        Access::Tenant(t) => format!("tenant:{t}"),
    }
}

/// The host part of `host:port` (brackets of an IPv6 address removed).
pub fn host(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    }
}

impl Secure {
    /// Writes `ca.pem`, `node{id}.pem` and `node{id}.key` into `dir` (created; files of an
    /// earlier run there are replaced) and draws the tokens. `names[i]` are the names node
    /// `i + 1`'s certificate carries besides the loopback ones: the hosts it is dialed at.
    pub fn generate(dir: &Path, names: &[Vec<String>]) -> Result<Secure, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let write = |name: &str, text: &str| -> Result<PathBuf, String> {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(path)
        };
        let run_ca = DevCa::new("weir-jepsen run CA")?;
        let ca = write("ca.pem", &run_ca.cert_pem())?;
        let mut files = vec![];
        for (i, hosts) in names.iter().enumerate() {
            let id = i + 1;
            // One certificate for the client, peer and HTTP ports and for dialing peers.
            let issued =
                run_ca.issue_for(&format!("weir-jepsen node {id}"), hosts, Validity::Current)?;
            files.push(TlsFiles {
                cert: write(&format!("node{id}.pem"), &issued.cert_pem)?,
                key: write(&format!("node{id}.key"), &issued.key_pem)?,
                ca: ca.clone(),
            });
        }
        let mut secrets = BTreeMap::new();
        let accesses = [Access::Admin, Access::Read]
            .into_iter()
            .chain(TENANTS.iter().map(|t| Access::Tenant(t)));
        for access in accesses {
            secrets.insert(role(access), secret()?);
        }
        let connector = Connector::tls(weir_proto::tls::client_config(&ca)?);
        Ok(Secure {
            ca,
            files,
            secrets,
            connector,
        })
    }

    /// The `[[tokens]]` entries: each role's hashed secret.
    pub fn tokens(&self) -> Vec<TokenEntry> {
        self.secrets
            .iter()
            .map(|(role, secret)| TokenEntry {
                sha256: hash_token(secret),
                role: role.clone(),
            })
            .collect()
    }

    /// Node `config.id`'s config with TLS and the tokens on, and no plaintext exception.
    pub fn apply(&self, config: &mut Config) -> Result<(), String> {
        let files = usize::try_from(config.id)
            .ok()
            .and_then(|id| self.files.get(id.wrapping_sub(1)))
            .ok_or_else(|| format!("no certificate for node {}", config.id))?;
        config.tls = Some(files.clone());
        config.tokens = self.tokens();
        config.insecure = false;
        Ok(())
    }

    /// The secret of `access`'s token (`None` for a tenant without one).
    pub fn token(&self, access: Access) -> Option<&str> {
        self.secrets.get(&role(access)).map(String::as_str)
    }

    /// TLS against the run's CA, and `access`'s token.
    pub fn security(&self, access: Access) -> ClientSecurity {
        ClientSecurity {
            connector: self.connector.clone(),
            token: self.token(access).map(str::to_owned),
        }
    }

    /// TLS against the run's CA and no token.
    fn tls_only(&self) -> ClientSecurity {
        ClientSecurity {
            connector: self.connector.clone(),
            token: None,
        }
    }
}

/// The security in force in this process (`None`: plaintext, no tokens).
static CURRENT: RwLock<Option<Arc<Secure>>> = RwLock::new(None);

/// Sets the security every later dial uses (`None`: none).
pub fn install(secure: Option<Arc<Secure>>) {
    *CURRENT.write().unwrap_or_else(|e| e.into_inner()) = secure;
}

/// The security in force, if the run is secure.
pub fn current() -> Option<Arc<Secure>> {
    CURRENT.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// What a client of `access` dials with: plaintext and no token unless the run is secure.
pub fn security(access: Access) -> ClientSecurity {
    current().map_or_else(ClientSecurity::default, |s| s.security(access))
}

/// A client of `servers` with `access`'s role, speaking to the run's group.
pub fn client(servers: Vec<String>, access: Access) -> Client {
    in_run_group(Client::with_security(servers, security(access)))
}

/// The data group every tenant of the run lives in, on a cluster of several groups
/// (`--groups`); 0: the run's nodes host one group.
static RUN_GROUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Has every client made from now on speak to data group `group`.
pub fn set_run_group(group: u64) {
    RUN_GROUP.store(group, std::sync::atomic::Ordering::Relaxed);
}

/// The data group the run's tenants live in, if the nodes host several.
pub fn run_group() -> Option<u64> {
    match RUN_GROUP.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        g => Some(g),
    }
}

/// `client`, speaking to the run's group if the nodes host several.
pub fn in_run_group(client: Client) -> Client {
    match run_group() {
        Some(g) => client.in_group(g),
        None => client,
    }
}

/// How long one probe of [`check`] may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(8);

/// What one probe of [`check`] saw: whether the node served it, and whether a refusal
/// said what it should.
struct Seen {
    served: bool,
    /// The refusal's text carried what the probe expects (unused when served).
    reason_ok: bool,
    text: String,
}

/// Asks `addr` for its status with `security`; `want` is the text a refusal must carry
/// (empty: any refusal).
async fn ask(addr: &str, security: &ClientSecurity, want: &str) -> Seen {
    let asked = tokio::time::timeout(
        PROBE_TIMEOUT,
        Client::ask_node_with(addr, &Request::Status, security),
    )
    .await;
    let (served, text) = match asked {
        Ok(Ok(Response::Status(s))) => (true, format!("served: node {} {}", s.id, s.state)),
        Ok(Ok(Response::Failed(Failure::Forbidden(why)))) => (false, format!("forbidden: {why}")),
        Ok(Ok(other)) => (false, format!("answered {other:?}")),
        Ok(Err(e)) => (false, e.to_string()),
        Err(_) => (false, format!("no answer within {PROBE_TIMEOUT:?}")),
    };
    Seen {
        served,
        reason_ok: text.contains(want),
        text,
    }
}

/// `GET /v1/status` at `addr` through `connector` (plaintext or TLS), with `bearer` if
/// given; served means an HTTP status line came back, and `want` is the status a refusal
/// must carry (empty: any refusal, an HTTP answer included only if not 2xx).
async fn http(addr: &str, connector: &Connector, bearer: Option<&str>, want: &str) -> Seen {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut stream = connector
            .connect(tcp, addr)
            .await
            .map_err(|e| e.to_string())?;
        let auth = bearer.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let request =
            format!("GET /v1/status HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut head = [0u8; 12];
        let mut got = 0;
        while got < head.len() {
            match stream.read(&mut head[got..]).await {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if got == 0 => return Err(format!("read: {e}")),
                Err(_) => break,
            }
        }
        Ok::<String, String>(String::from_utf8_lossy(&head[..got]).into_owned())
    };
    let (served, text) = match tokio::time::timeout(PROBE_TIMEOUT, exchange).await {
        Ok(Ok(head)) if head.starts_with("HTTP/1.") => {
            let status = head.get(9..12).unwrap_or("").to_string();
            (status.starts_with('2'), format!("HTTP {status}"))
        }
        Ok(Ok(head)) if head.is_empty() => (false, "closed without an answer".into()),
        Ok(Ok(head)) => (false, format!("not HTTP: {head:?}")),
        Ok(Err(e)) => (false, e),
        Err(_) => (false, format!("no answer within {PROBE_TIMEOUT:?}")),
    };
    Seen {
        served,
        reason_ok: text.contains(want),
        text,
    }
}

/// One row of the `security` op: a probe, what it expected and what it saw.
fn row(node: u64, probe: &str, expect_served: bool, seen: Seen) -> serde_json::Value {
    json!({
        "node": node,
        "probe": probe,
        "expect": if expect_served { "served" } else { "refused" },
        "served": seen.served,
        "reason_ok": seen.reason_ok,
        "saw": seen.text,
    })
}

/// Probes every node's client and HTTP ports (`nodes`: id, client address, HTTP address)
/// and records the results as one `security` op of the nemesis process.
pub async fn check(secure: &Secure, nodes: &[(u64, String, String)], history: &Recorder) {
    history.record(history::NEMESIS, Kind::Invoke, "security", json!({}));
    let admin = secure.token(Access::Admin).unwrap_or_default().to_owned();
    let plain_admin = ClientSecurity {
        connector: Connector::plain(),
        token: Some(admin.clone()),
    };
    let unknown = ClientSecurity {
        token: Some("not-a-token-of-this-run".into()),
        ..secure.tls_only()
    };
    let mut rows = vec![];
    for (id, client, http_addr) in nodes {
        let id = *id;
        rows.push(row(
            id,
            "tls+admin",
            true,
            ask(client, &secure.security(Access::Admin), "").await,
        ));
        rows.push(row(
            id,
            "plaintext",
            false,
            ask(client, &plain_admin, "").await,
        ));
        rows.push(row(
            id,
            "no-token",
            false,
            ask(client, &secure.tls_only(), "requires a token").await,
        ));
        rows.push(row(
            id,
            "unknown-token",
            false,
            ask(client, &unknown, "not recognized").await,
        ));
        rows.push(row(
            id,
            "tenant-status",
            false,
            ask(
                client,
                &secure.security(Access::Tenant(TENANT)),
                "need the admin role",
            )
            .await,
        ));
        if http_addr.is_empty() {
            continue;
        }
        rows.push(row(
            id,
            "https+admin",
            true,
            http(http_addr, &secure.connector, Some(&admin), "").await,
        ));
        rows.push(row(
            id,
            "http-plaintext",
            false,
            http(http_addr, &Connector::plain(), Some(&admin), "").await,
        ));
        rows.push(row(
            id,
            "https-no-token",
            false,
            http(http_addr, &secure.connector, None, "HTTP 401").await,
        ));
    }
    history.record(
        history::NEMESIS,
        Kind::Info,
        "security",
        json!({ "probes": rows }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setup::{CEIL_TENANT, HALT_TENANT};
    use weir_server::config::Peer;

    /// A secure run's files in a fresh temporary directory.
    fn generated(name: &str, names: &[Vec<String>]) -> (PathBuf, Secure) {
        let dir = std::env::temp_dir().join(format!("wj-secure-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let secure = Secure::generate(&dir, names).expect("generated");
        (dir, secure)
    }

    #[test]
    fn a_secure_config_parses_with_weirs_own_parser_with_tls_and_every_token() {
        // Namespace addresses: not loopback, so without TLS the config would need insecure.
        let names: Vec<Vec<String>> = (1..=3)
            .map(|i| vec![format!("10.213.0.{i}"), format!("10.213.0.{}", 20 + i)])
            .collect();
        let (dir, secure) = generated("config", &names);
        let peers: Vec<Peer> = (1..=3)
            .map(|id| Peer {
                id,
                peer: format!("10.213.0.{}:7511", 20 + id),
                client: format!("10.213.0.{id}:7411"),
            })
            .collect();
        let mut config = Config {
            id: 2,
            client_addr: "10.213.0.2:7411".into(),
            peer_addr: "10.213.0.22:7511".into(),
            peer_listen: Some("10.213.0.2:7511".into()),
            http_listen: "10.213.0.2:7611".into(),
            peers,
            insecure: true,
            ..Config::default()
        };
        secure.apply(&mut config).unwrap();
        let text = toml::to_string(&config).unwrap();
        let parsed = Config::parse(&text).expect("weir parses what the harness writes");
        assert!(!parsed.insecure);
        let tls = parsed.tls.clone().expect("tls set");
        assert_eq!(tls.cert, dir.join("node2.pem"));
        assert_eq!(tls.key, dir.join("node2.key"));
        assert_eq!(tls.ca, dir.join("ca.pem"));
        for f in [&tls.cert, &tls.key, &tls.ca] {
            assert!(std::fs::read_to_string(f).unwrap().contains("-----BEGIN"));
        }
        let mut roles: Vec<&str> = parsed.tokens.iter().map(|t| t.role.as_str()).collect();
        roles.sort();
        assert_eq!(
            roles,
            [
                "admin",
                "read",
                "tenant:ceil",
                "tenant:halty",
                "tenant:jepsen"
            ]
        );
        // Hashed, never the secret itself, and each secret hashes to its entry.
        for access in [
            Access::Admin,
            Access::Read,
            Access::Tenant(TENANT),
            Access::Tenant(HALT_TENANT),
            Access::Tenant(CEIL_TENANT),
        ] {
            let secret = secure.token(access).unwrap();
            assert!(!text.contains(secret));
            let entry = parsed
                .tokens
                .iter()
                .find(|t| t.role == role(access))
                .unwrap();
            assert_eq!(entry.sha256, hash_token(secret));
        }
        // The same config without TLS is refused on these addresses: the test above is not
        // passing for want of a check.
        let mut plain = parsed.clone();
        plain.tls = None;
        assert!(
            plain
                .validate()
                .unwrap_err()
                .contains("not a loopback address")
        );
        assert!(
            secure
                .apply(&mut Config {
                    id: 4,
                    ..Config::default()
                })
                .is_err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_node_certificate_verifies_against_the_run_ca_for_its_own_names_only() {
        let (dir, secure) = generated("handshake", &[vec![], vec![]]);
        let server = weir_server::security::tls::server_config(&secure.files[0]).unwrap();
        let acceptor = weir_server::security::Acceptor::tls(server);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            for _ in 0..2 {
                if let Ok((tcp, _)) = listener.accept().await {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        if let Ok(mut s) = acceptor.accept(tcp).await {
                            let _ = s.write_all(b"ok").await;
                            let _ = s.shutdown().await;
                        }
                    });
                }
            }
        });
        // Dialed at a name the certificate carries: the handshake completes.
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut s = secure
            .connector
            .connect(tcp, &format!("127.0.0.1:{}", addr.port()))
            .await
            .expect("the run's CA verifies node 1");
        let mut got = String::new();
        s.read_to_string(&mut got).await.unwrap();
        assert_eq!(got, "ok");
        // Dialed as another host (one it does not name): refused.
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let refused = secure
            .connector
            .connect(tcp, &format!("10.213.0.9:{}", addr.port()))
            .await;
        assert!(refused.is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn accesses_name_their_roles_and_hosts_lose_ports_and_brackets() {
        assert_eq!(role(Access::Tenant("halty")), "tenant:halty");
        assert_eq!(role(Access::Read), "read");
        assert_eq!(host("10.213.0.21:7511"), "10.213.0.21");
        assert_eq!(host("[::1]:7411"), "::1");
    }
}
