//! `--tls-cert FILE --tls-key FILE`: HTTPS, with rustls (through tokio-rustls, ring as the crypto
//! provider). The certificate chain and the private key are PEM files, read once at startup; a file
//! that cannot be used stops the start with an error that names it (never its contents).

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// TLS settings that could not be used; the Display is the startup error.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file could not be read or holds no PEM certificate.
    #[error("--tls-cert {path}: {reason}")]
    Cert {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The key file could not be read or holds no PEM private key.
    #[error("--tls-key {path}: {reason}")]
    Key {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the pair (e.g. the key does not match the certificate).
    #[error("--tls-cert/--tls-key: {0}")]
    Pair(String),
}

/// The acceptor for `cert` (a PEM chain, leaf first) and `key` (a PEM private key).
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let cert_error = |reason: String| TlsError::Cert {
        path: cert.display().to_string(),
        reason,
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|err| cert_error(err.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| cert_error(err.to_string()))?;
    if chain.is_empty() {
        return Err(cert_error("no PEM certificate in it".to_owned()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|err| TlsError::Key {
        path: key.display().to_string(),
        reason: err.to_string(),
    })?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| TlsError::Pair(err.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|err| TlsError::Pair(err.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
