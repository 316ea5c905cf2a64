//! How peers prove who they are: a shared secret (`peer_secret_file`), TLS
//! with client certificates (`peer_tls`), or both. The handshake that uses
//! them is in `handshake.rs`; this module loads and checks the material.
//!
//! Shared secret: the file's contents with leading and trailing whitespace
//! removed, at least `PEER_SECRET_BYTES_MIN` bytes (`openssl rand -hex 32`
//! makes 64). It never goes on the wire: each side proves it knows it with
//! an HMAC-SHA256 over both sides' fresh nonces (`handshake.rs`).
//!
//! TLS: TLS 1.3 only, ring as the crypto provider, client certificates
//! required, both sides checked against the CA bundle. A member's
//! certificate names it with the DNS subject alternative name
//! `keel-member-<id>` (`member_name`); the connecting side asks for that
//! name (SNI and the server certificate check), the accepting side checks
//! the client certificate names the id the peer's hello claims.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use sha2::Sha256;

use crate::pem::{self, PemError};

/// Shortest shared secret accepted (bytes after trimming whitespace).
pub const PEER_SECRET_BYTES_MIN: usize = 32;
/// Longest shared secret file read.
pub const PEER_SECRET_BYTES_MAX: usize = 4096;
/// Bytes of an HMAC-SHA256 proof.
pub const PROOF_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum PeerAuthError {
    #[error("peer_secret_file {path}: {source}")]
    SecretRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("peer_secret_file {path}: {len} bytes after trimming whitespace; a shared secret needs {PEER_SECRET_BYTES_MIN}..={PEER_SECRET_BYTES_MAX} (e.g. `openssl rand -hex 32 > {path}`)")]
    SecretLength { path: PathBuf, len: usize },
    #[error("peer TLS: {0}")]
    Pem(#[from] PemError),
    #[error("peer TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("peer TLS: the CA bundle: {0}")]
    Verifier(String),
    #[error("peer TLS: {path}: the certificate does not name this member (DNS subject alternative name {expected:?} missing): peers would refuse it")]
    OwnCertificate { path: PathBuf, expected: String },
}

/// The shared secret; its `Debug` shows only its length.
#[derive(Clone)]
pub struct PeerSecret(Arc<[u8]>);

impl std::fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PeerSecret({} bytes)", self.0.len())
    }
}

impl PeerSecret {
    /// Reads `path` (see the module comment for the format).
    pub fn from_file(path: &Path) -> Result<PeerSecret, PeerAuthError> {
        let read_error = |source| PeerAuthError::SecretRead {
            path: path.into(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        let mut bytes = Vec::new();
        file.take(PEER_SECRET_BYTES_MAX as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        PeerSecret::from_bytes(&bytes).map_err(|len| PeerAuthError::SecretLength {
            path: path.into(),
            len,
        })
    }

    /// The secret in `bytes` (whitespace around it trimmed); Err(length)
    /// if it is too short or too long.
    pub fn from_bytes(bytes: &[u8]) -> Result<PeerSecret, usize> {
        let secret = bytes.trim_ascii();
        if !(PEER_SECRET_BYTES_MIN..=PEER_SECRET_BYTES_MAX).contains(&secret.len()) {
            return Err(secret.len());
        }
        Ok(PeerSecret(secret.into()))
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        for part in parts {
            mac.update(part);
        }
        mac
    }

    /// HMAC-SHA256 of the concatenated `parts`.
    pub(crate) fn proof(&self, parts: &[&[u8]]) -> [u8; PROOF_BYTES] {
        self.mac(parts).finalize().into_bytes().into()
    }

    /// Whether `claimed` is the HMAC of `parts` (constant-time comparison).
    pub(crate) fn verify(&self, parts: &[&[u8]], claimed: &[u8]) -> bool {
        self.mac(parts).verify_slice(claimed).is_ok()
    }
}

/// Logs a warning if others than its owner may read the secret at `path`.
pub fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(metadata) = std::fs::metadata(path) {
        if metadata.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                mode = format_args!("{:o}", metadata.permissions().mode() & 0o777),
                "peer_secret_file is readable by others than its owner (chmod 600 it)"
            );
        }
    }
}

/// The DNS subject alternative name that makes a certificate member `id`'s.
pub fn member_name(id: u64) -> String {
    format!("keel-member-{id}")
}

/// Whether `certificate` (DER) names member `id` (see `member_name`).
pub fn certificate_names_member(certificate: &CertificateDer<'_>, id: u64) -> bool {
    let Ok(name) = ServerName::try_from(member_name(id)) else {
        return false;
    };
    webpki::EndEntityCert::try_from(certificate)
        .is_ok_and(|parsed| parsed.verify_is_valid_for_subject_name(&name).is_ok())
}

/// rustls configurations for both ends of a peer connection.
#[derive(Clone)]
pub struct PeerTls {
    pub(crate) server: Arc<ServerConfig>,
    pub(crate) client: Arc<ClientConfig>,
}

impl std::fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerTls(TLS 1.3, client certificates required)")
    }
}

impl PeerTls {
    /// Loads member `self_id`'s certificate chain and key and the CA
    /// bundle peers' certificates must chain to; the certificate must name
    /// `self_id`.
    pub fn from_files(
        self_id: u64,
        cert_file: &Path,
        key_file: &Path,
        ca_file: &Path,
    ) -> Result<PeerTls, PeerAuthError> {
        let chain = pem::load_cert_chain(cert_file)?;
        if !certificate_names_member(&chain[0], self_id) {
            return Err(PeerAuthError::OwnCertificate {
                path: cert_file.into(),
                expected: member_name(self_id),
            });
        }
        let key = pem::load_private_key(key_file)?;
        let roots = pem::load_ca_roots(ca_file)?;
        PeerTls::new(chain, key, roots)
    }

    /// Configurations presenting `chain` (end-entity first) and `key`,
    /// trusting the CAs in `roots` for the other side.
    pub fn new(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        roots: RootCertStore,
    ) -> Result<PeerTls, PeerAuthError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(roots);
        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
                .build()
                .map_err(|error| PeerAuthError::Verifier(error.to_string()))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        // The connecting side never reads after the handshake: no session
        // tickets for it to leave unread, and no resumption (every
        // connection shows and checks its certificates).
        server.send_tls13_tickets = 0;
        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|error| PeerAuthError::Verifier(error.to_string()))?;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_webpki_verifier(server_verifier)
            .with_client_auth_cert(chain, key)?;
        client.resumption = Resumption::disabled();
        Ok(PeerTls {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

/// What a peer connection must prove, both directions alike. Default:
/// nothing but the cluster id (a trusted network).
#[derive(Clone, Debug, Default)]
pub struct PeerAuth {
    pub secret: Option<PeerSecret>,
    pub tls: Option<PeerTls>,
}

/// Bits of the hello's `auth` byte.
pub(crate) const AUTH_SECRET: u8 = 1;
pub(crate) const AUTH_TLS: u8 = 2;

impl PeerAuth {
    /// What this node requires, as the hello's `auth` byte.
    pub(crate) fn flags(&self) -> u8 {
        (if self.secret.is_some() {
            AUTH_SECRET
        } else {
            0
        }) | (if self.tls.is_some() { AUTH_TLS } else { 0 })
    }
}

/// The `auth` byte in words, for refusals.
pub(crate) fn describe_flags(flags: u8) -> String {
    let mut words = Vec::new();
    if flags & AUTH_SECRET != 0 {
        words.push("shared secret");
    }
    if flags & AUTH_TLS != 0 {
        words.push("TLS");
    }
    if flags & !(AUTH_SECRET | AUTH_TLS) != 0 {
        words.push("unknown methods");
    }
    if words.is_empty() {
        "no authentication".into()
    } else {
        words.join(" + ")
    }
}
