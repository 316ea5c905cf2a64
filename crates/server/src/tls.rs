//! PEM certificates, keys and CA bundles into rustls configurations: the
//! client port's TLS (`secure_client_port`) and, for the peer transport,
//! the same files with client certificates required both ways.
//!
//! Files (the `tls_cert_file`, `tls_key_file`, `tls_ca_file` keys):
//! - certificate file: the server's certificate first, then any
//!   intermediates, PEM (`-----BEGIN CERTIFICATE-----`);
//! - key file: its private key, PEM, PKCS#8 (`BEGIN PRIVATE KEY`), PKCS#1
//!   (`BEGIN RSA PRIVATE KEY`) or SEC1 (`BEGIN EC PRIVATE KEY`);
//! - CA file: one or more CA certificates that client (or peer)
//!   certificates must chain to.
//!
//! Every function reads its files when called; `ReloadableServerConfig`
//! keeps the config built last, and `reload` (SIGHUP in `keel server`)
//! builds a new one that only handshakes started afterwards use.
//! The crypto provider is rustls' `ring` provider, named here once.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::server::WebPkiClientVerifier;

/// Whether the TLS server asks connecting clients for a certificate, as
/// ZooKeeper's `ssl.clientAuth` (whose default is `need`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No certificate asked for.
    None,
    /// Asked for; a client without one is served, one with a certificate
    /// that does not chain to the CA is refused.
    Want,
    /// Required: a client without a valid certificate is refused.
    #[default]
    Need,
}

impl std::str::FromStr for ClientAuth {
    type Err = String;

    fn from_str(text: &str) -> Result<ClientAuth, String> {
        match text.to_ascii_lowercase().as_str() {
            "none" => Ok(ClientAuth::None),
            "want" => Ok(ClientAuth::Want),
            "need" => Ok(ClientAuth::Need),
            _ => Err(format!("{text:?} is not none, want or need")),
        }
    }
}

impl std::fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Want => "want",
            ClientAuth::Need => "need",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file that does not load (keel_consensus::pem: the one loader
    /// of the client port's and the peers' files).
    #[error(transparent)]
    Pem(#[from] keel_consensus::pem::PemError),
    #[error("client authentication {client_auth} needs a CA file (tls_ca_file)")]
    NoCa { client_auth: ClientAuth },
    #[error("client certificate verifier over {path}: {source}")]
    Verifier {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("certificate {cert} with key {key}: {source}")]
    Identity {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    #[error("TLS protocol versions: {0}")]
    Versions(rustls::Error),
}

/// The three files of a TLS identity and trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Needed to check certificates the other side presents.
    pub ca_file: Option<PathBuf>,
}

/// The crypto provider of every config built here.
pub fn crypto_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The PEM loaders of the client port's files are the peers' own (one
/// reader with one size bound and one set of errors).
pub use keel_consensus::pem::{load_ca_roots, load_certificates, load_private_key};

/// A server config presenting `files`' certificate, checking client
/// certificates against `files.ca_file` as `client_auth` says.
pub fn server_config(
    files: &TlsFiles,
    client_auth: ClientAuth,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = crypto_provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?;
    let builder = match (client_auth, &files.ca_file) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        (_, None) => return Err(TlsError::NoCa { client_auth }),
        (_, Some(ca_file)) => {
            let roots = Arc::new(load_ca_roots(ca_file)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider);
            let verifier = if client_auth == ClientAuth::Want {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier.build().map_err(|source| TlsError::Verifier {
                path: ca_file.clone(),
                source,
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let certificates = load_certificates(&files.cert_file)?;
    let key = load_private_key(&files.key_file)?;
    let config = builder
        .with_single_cert(certificates, key)
        .map_err(|source| TlsError::Identity {
            cert: files.cert_file.clone(),
            key: files.key_file.clone(),
            source,
        })?;
    Ok(Arc::new(config))
}

/// A client config trusting `ca_file`'s CAs, presenting `files`'
/// certificate when the server asks (mutual TLS: a peer dialing a peer).
pub fn mutual_client_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let ca_file = files.ca_file.as_ref().ok_or(TlsError::NoCa {
        client_auth: ClientAuth::Need,
    })?;
    let roots = load_ca_roots(ca_file)?;
    let certificates = load_certificates(&files.cert_file)?;
    let key = load_private_key(&files.key_file)?;
    let config = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Versions)?
        .with_root_certificates(roots)
        .with_client_auth_cert(certificates, key)
        .map_err(|source| TlsError::Identity {
            cert: files.cert_file.clone(),
            key: files.key_file.clone(),
            source,
        })?;
    Ok(Arc::new(config))
}

/// A server config that can be rebuilt from its files while connections
/// made with the previous one go on (they keep their own session state;
/// only new handshakes read `current`).
pub struct ReloadableServerConfig {
    files: TlsFiles,
    client_auth: ClientAuth,
    current: RwLock<Arc<rustls::ServerConfig>>,
}

impl ReloadableServerConfig {
    pub fn load(
        files: TlsFiles,
        client_auth: ClientAuth,
    ) -> Result<ReloadableServerConfig, TlsError> {
        let current = RwLock::new(server_config(&files, client_auth)?);
        Ok(ReloadableServerConfig {
            files,
            client_auth,
            current,
        })
    }

    /// The config for a handshake starting now.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        self.current.read().clone()
    }

    /// Reads the files again; on an error the config in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = server_config(&self.files, self.client_auth)?;
        *self.current.write() = fresh;
        Ok(())
    }

    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    pub fn client_auth(&self) -> ClientAuth {
        self.client_auth
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn missing_and_empty_files_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let error = load_certificates(&missing).unwrap_err().to_string();
        assert!(error.contains("nope.pem"), "{error}");
        let empty = write(dir.path(), "empty.pem", "no pem here\n");
        let error = load_certificates(&empty).unwrap_err().to_string();
        assert!(error.contains("holds no CERTIFICATE"), "{error}");
        let error = load_private_key(&empty).unwrap_err().to_string();
        assert!(error.contains("holds no private key"), "{error}");
    }

    #[test]
    fn client_auth_without_a_ca_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles {
            cert_file: dir.path().join("cert.pem"),
            key_file: dir.path().join("key.pem"),
            ca_file: None,
        };
        for client_auth in [ClientAuth::Want, ClientAuth::Need] {
            let error = server_config(&files, client_auth).unwrap_err();
            assert!(matches!(error, TlsError::NoCa { .. }), "{error}");
        }
    }

    fn fixture(name: &str) -> PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/tls")
            .join(name)
    }

    fn fixture_files() -> TlsFiles {
        TlsFiles {
            cert_file: fixture("server.pem"),
            key_file: fixture("server.key"),
            ca_file: Some(fixture("ca.pem")),
        }
    }

    fn client_files(name: &str) -> TlsFiles {
        TlsFiles {
            cert_file: fixture(&format!("{name}.pem")),
            key_file: fixture(&format!("{name}.key")),
            ca_file: Some(fixture("ca.pem")),
        }
    }

    /// A TLS handshake in memory plus one byte each way; Err if either
    /// side fails (a refused client certificate fails the client's read).
    async fn handshake(
        server: Arc<rustls::ServerConfig>,
        client: Arc<rustls::ClientConfig>,
    ) -> Result<(), std::io::Error> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let accept = async move {
            let mut stream = tokio_rustls::TlsAcceptor::from(server)
                .accept(server_io)
                .await?;
            stream.write_all(b"s").await?;
            stream.flush().await?;
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await?;
            Ok::<_, std::io::Error>(())
        };
        let connect = async move {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            let mut stream = tokio_rustls::TlsConnector::from(client)
                .connect(name, client_io)
                .await?;
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).await?;
            stream.write_all(b"c").await?;
            stream.flush().await?;
            Ok::<_, std::io::Error>(())
        };
        let (accepted, connected) = tokio::join!(accept, connect);
        accepted.and(connected)
    }

    fn no_client_certificate() -> Arc<rustls::ClientConfig> {
        let roots = load_ca_roots(&fixture("ca.pem")).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(crypto_provider())
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }

    #[tokio::test]
    async fn mutual_tls_needs_a_client_certificate_of_the_ca() {
        let server = server_config(&fixture_files(), ClientAuth::Need).unwrap();
        let client = mutual_client_config(&client_files("client")).unwrap();
        handshake(server.clone(), client).await.unwrap();
        let intruder = mutual_client_config(&TlsFiles {
            ca_file: Some(fixture("ca.pem")),
            ..client_files("intruder")
        })
        .unwrap();
        assert!(handshake(server.clone(), intruder).await.is_err());
        assert!(handshake(server, no_client_certificate()).await.is_err());
        let want = server_config(&fixture_files(), ClientAuth::Want).unwrap();
        handshake(want, no_client_certificate()).await.unwrap();
        let none = server_config(&fixture_files(), ClientAuth::None).unwrap();
        handshake(none, no_client_certificate()).await.unwrap();
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let files = TlsFiles {
            key_file: fixture("client.key"),
            ..fixture_files()
        };
        let error = server_config(&files, ClientAuth::Need).unwrap_err();
        assert!(matches!(error, TlsError::Identity { .. }), "{error}");
    }

    #[test]
    fn reload_swaps_the_config_and_a_failed_reload_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let copy =
            |from: &str, to: &str| std::fs::copy(fixture(from), dir.path().join(to)).unwrap();
        copy("server.pem", "cert.pem");
        copy("server.key", "key.pem");
        let files = TlsFiles {
            cert_file: dir.path().join("cert.pem"),
            key_file: dir.path().join("key.pem"),
            ca_file: Some(fixture("ca.pem")),
        };
        let reloadable = ReloadableServerConfig::load(files, ClientAuth::Need).unwrap();
        let first = reloadable.current();
        copy("client.pem", "cert.pem");
        copy("client.key", "key.pem");
        reloadable.reload().unwrap();
        let second = reloadable.current();
        assert!(!Arc::ptr_eq(&first, &second));
        std::fs::write(dir.path().join("key.pem"), "garbage").unwrap();
        assert!(reloadable.reload().is_err());
        assert!(Arc::ptr_eq(&second, &reloadable.current()));
    }

    #[test]
    fn client_auth_parses_zookeepers_spellings() {
        assert_eq!("NEED".parse::<ClientAuth>().unwrap(), ClientAuth::Need);
        assert_eq!("want".parse::<ClientAuth>().unwrap(), ClientAuth::Want);
        assert_eq!("None".parse::<ClientAuth>().unwrap(), ClientAuth::None);
        assert!("optional".parse::<ClientAuth>().is_err());
        assert_eq!(ClientAuth::default(), ClientAuth::Need);
    }
}
