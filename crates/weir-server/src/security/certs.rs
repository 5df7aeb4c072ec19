//! Development certificates: a CA and node certificates for the loopback configs
//! (`weir certs init DIR`), and the same in memory for the cluster tests and the partition
//! harness.
//!
//! A node certificate names `localhost`, `127.0.0.1` and `::1` (and, through
//! [`DevCa::issue_for`], the hosts a node is dialed at) and is good for both server and
//! client authentication: one file serves the client port, the peer port, and the node's
//! own dialing of its peers (mutual TLS). These are for development and tests: a deployment
//! issues certificates naming its hosts from its own CA.

use std::path::Path;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, date_time_ymd,
};

/// The names every development certificate carries: what loopback clients dial.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// When a development certificate is valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validity {
    /// 2024-01-01 to 2100-01-01.
    Current,
    /// 2020-01-01 to 2021-01-01: every handshake must refuse it.
    Expired,
}

/// A CA held in memory: issues node certificates.
pub struct DevCa {
    cert: Certificate,
    key: KeyPair,
}

/// A certificate and its private key, PEM.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

fn rc(e: rcgen::Error) -> String {
    format!("certificate generation: {e}")
}

impl DevCa {
    /// A new self-signed CA called `name`.
    pub fn new(name: &str) -> Result<DevCa, String> {
        let key = KeyPair::generate().map_err(rc)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = date_time_ymd(2024, 1, 1);
        params.not_after = date_time_ymd(2100, 1, 1);
        let cert = params.self_signed(&key).map_err(rc)?;
        Ok(DevCa { cert, key })
    }

    /// The CA certificate, PEM: what nodes and clients verify against.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A node certificate called `name` for the loopback names, valid as `validity` says.
    pub fn issue(&self, name: &str, validity: Validity) -> Result<Issued, String> {
        self.issue_for(name, &[], validity)
    }

    /// A node certificate called `name` for the loopback names and `hosts` (the names the
    /// node is dialed at), for both ends of a connection (server and client
    /// authentication), valid as `validity` says.
    pub fn issue_for(
        &self,
        name: &str,
        hosts: &[String],
        validity: Validity,
    ) -> Result<Issued, String> {
        let key = KeyPair::generate().map_err(rc)?;
        let mut names: Vec<String> = LOOPBACK_NAMES.iter().map(|n| n.to_string()).collect();
        for host in hosts {
            if !names.contains(host) {
                names.push(host.clone());
            }
        }
        let mut params = CertificateParams::new(names).map_err(rc)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        (params.not_before, params.not_after) = match validity {
            Validity::Current => (date_time_ymd(2024, 1, 1), date_time_ymd(2100, 1, 1)),
            Validity::Expired => (date_time_ymd(2020, 1, 1), date_time_ymd(2021, 1, 1)),
        };
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(rc)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Writes `text` to `path` with permissions `mode` (before umask), refusing to overwrite
/// (a CA key overwritten is a cluster whose nodes no longer trust each other).
fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// A certificate's permissions: public, readable by all.
const CERT_MODE: u32 = 0o644;

/// A private key's permissions: its owner's alone, whatever the umask (a key another user
/// can read lets them impersonate the node).
const KEY_MODE: u32 = 0o600;

/// Writes `ca.pem` and `node{i}.pem` / `node{i}.key` for i in 1..=`nodes` into `dir`
/// (created if missing; existing files are not overwritten; keys readable by their owner
/// alone). Returns the files written.
pub fn init(dir: &Path, nodes: u64) -> Result<Vec<std::path::PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let ca = DevCa::new("weir development CA")?;
    let mut written = vec![dir.join("ca.pem")];
    write_new(&written[0], &ca.cert_pem(), CERT_MODE)?;
    for id in 1..=nodes {
        let issued = ca.issue(&format!("weir node {id}"), Validity::Current)?;
        let cert = dir.join(format!("node{id}.pem"));
        let key = dir.join(format!("node{id}.key"));
        write_new(&cert, &issued.cert_pem, CERT_MODE)?;
        write_new(&key, &issued.key_pem, KEY_MODE)?;
        written.push(cert);
        written.push(key);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Keys are written 0600 whatever the process's umask (0022 gave them 0644).
    #[test]
    fn init_writes_private_keys_readable_by_their_owner_alone() {
        let dir = std::env::temp_dir().join(format!("weir-certs-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let written = init(&dir, 2).unwrap();
        assert_eq!(written.len(), 5);
        for path in written {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            if path.extension().is_some_and(|e| e == "key") {
                assert_eq!(mode, 0o600, "{} is {mode:o}", path.display());
            } else {
                assert_eq!(mode & 0o600, 0o600, "{} is {mode:o}", path.display());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
