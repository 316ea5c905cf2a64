//! PEM files for rustls: a certificate chain, a private key, a bundle of
//! CA certificates. The peer transport loads its `tls_*_file`s here; the
//! client port can load the same keys through the same functions.
//!
//! - certificate chain (`tls_cert_file`): one or more `CERTIFICATE` blocks,
//!   this node's certificate first, then any intermediates;
//! - private key (`tls_key_file`): the first `PRIVATE KEY` (PKCS#8),
//!   `RSA PRIVATE KEY` (PKCS#1) or `EC PRIVATE KEY` (SEC1) block;
//! - CA bundle (`tls_ca_file`): one or more `CERTIFICATE` blocks, each a
//!   trust anchor.
//!
//! Other blocks in a file are skipped; a file with none of what is asked
//! for, a block that does not decode or a file over `PEM_FILE_BYTES_MAX`
//! is refused with the file's path in the error.

use std::io::Read;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// Largest PEM file read (a long chain or a big CA bundle fits easily).
pub const PEM_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is larger than {PEM_FILE_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: bad PEM: {detail}")]
    Parse { path: PathBuf, detail: String },
    #[error("{path} holds no {what}")]
    Missing { path: PathBuf, what: &'static str },
    #[error("{path}: certificate {index} is not a usable CA certificate: {detail}")]
    BadCa {
        path: PathBuf,
        index: usize,
        detail: String,
    },
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, PemError> {
    let read_error = |source| PemError::Read {
        path: path.into(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(PEM_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > PEM_FILE_BYTES_MAX {
        return Err(PemError::TooLarge { path: path.into() });
    }
    Ok(bytes)
}

fn parse_error(path: &Path, error: rustls::pki_types::pem::Error) -> PemError {
    PemError::Parse {
        path: path.into(),
        detail: error.to_string(),
    }
}

/// Every `CERTIFICATE` block of `path`, in file order.
pub fn load_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let bytes = read_bounded(path)?;
    let certificates = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| parse_error(path, error))?;
    if certificates.is_empty() {
        return Err(PemError::Missing {
            path: path.into(),
            what: "CERTIFICATE block",
        });
    }
    Ok(certificates)
}

/// A certificate chain: the end-entity certificate first.
pub fn load_cert_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, PemError> {
    load_certificates(path)
}

/// The first private key of `path` (PKCS#8, PKCS#1 or SEC1).
pub fn load_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let bytes = read_bounded(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|error| match error {
        rustls::pki_types::pem::Error::NoItemsFound => PemError::Missing {
            path: path.into(),
            what: "private key (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block)",
        },
        error => parse_error(path, error),
    })
}

/// A trust store of every certificate in `path`.
pub fn load_ca_roots(path: &Path) -> Result<RootCertStore, PemError> {
    let mut roots = RootCertStore::empty();
    for (index, certificate) in load_certificates(path)?.into_iter().enumerate() {
        roots.add(certificate).map_err(|error| PemError::BadCa {
            path: path.into(),
            index,
            detail: error.to_string(),
        })?;
    }
    Ok(roots)
}
