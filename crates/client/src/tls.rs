//! TLS for the client: a server's secure client port (Keel's
//! `secure_client_port`, ZooKeeper's `secureClientPort`). The server's
//! certificate must chain to the CA file and name the host of the connect
//! string (an IP address or a DNS name); a client certificate is presented
//! when given (servers with client auth `need`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Where the client's TLS files are (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA certificates the server's certificate must chain to.
    pub ca_file: PathBuf,
    /// The client's certificate chain and key, both or neither.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {kind} from {path}: {source}")]
    Pem {
        kind: &'static str,
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("CA file {path}: {source}")]
    Anchor {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error(
        "a client certificate needs its key and the other way round (--tls-cert with --tls-key)"
    )]
    HalfIdentity,
    #[error("client certificate: {0}")]
    Identity(rustls::Error),
    #[error("TLS protocol versions: {0}")]
    Versions(rustls::Error),
    #[error("{0:?} is not a host name or IP address a certificate can name")]
    ServerName(String),
}

/// A loaded client TLS configuration (cheap to clone).
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let error = |source| TlsError::Pem {
        kind: "certificates",
        path: path.into(),
        source,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(error)?;
    if certificates.is_empty() {
        return Err(error(rustls::pki_types::pem::Error::NoItemsFound));
    }
    Ok(certificates)
}

impl ClientTls {
    pub fn load(options: &TlsOptions) -> Result<ClientTls, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in certificates(&options.ca_file)? {
            roots.add(certificate).map_err(|source| TlsError::Anchor {
                path: options.ca_file.clone(),
                source,
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Versions)?
            .with_root_certificates(roots);
        let config = match (&options.cert_file, &options.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert_file), Some(key_file)) => {
                let key =
                    PrivateKeyDer::from_pem_file(key_file).map_err(|source| TlsError::Pem {
                        kind: "private key",
                        path: key_file.clone(),
                        source,
                    })?;
                builder
                    .with_client_auth_cert(certificates(cert_file)?, key)
                    .map_err(TlsError::Identity)?
            }
            _ => return Err(TlsError::HalfIdentity),
        };
        Ok(ClientTls {
            config: Arc::new(config),
        })
    }

    /// TLS over `stream`, verifying the server as `host`.
    pub(crate) async fn connect(
        &self,
        host: &str,
        stream: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, crate::ClientError> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| TlsError::ServerName(host.to_owned()))?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        Ok(connector.connect(name, stream).await?)
    }
}
