//! TLS for the database's connections: rustls on ring (no OpenSSL), the
//! server's certificate verified against the platform's roots, or only
//! against the CA certificates of a file (`PgOptions::ca_file`, as libpq's
//! `sslrootcert`).
//!
//! The connection string's `sslmode` decides whether TLS is used:
//! `disable` never, `prefer` (the default) when the server offers it,
//! `require` always. Whenever TLS is used the certificate is verified
//! (libpq's `verify-full`): a server whose certificate does not verify is
//! refused, not reached in the clear.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls_platform_verifier::BuilderVerifierExt;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::PgError;

/// The connector: trusting only the certificates of `ca_file` when given,
/// else the platform's roots (the bundled Mozilla roots where the platform
/// has none).
pub(crate) fn connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, PgError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = || {
        rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| PgError::Tls {
                detail: e.to_string(),
            })
    };
    let config = match ca_file {
        Some(path) => builder()?
            .with_root_certificates(roots_from(path)?)
            .with_no_client_auth(),
        None => match builder()?.with_platform_verifier() {
            Ok(platform) => platform.with_no_client_auth(),
            Err(_) => builder()?
                .with_root_certificates(rustls::RootCertStore {
                    roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                })
                .with_no_client_auth(),
        },
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The CA certificates of a PEM file, as a root store.
fn roots_from(path: &Path) -> Result<rustls::RootCertStore, PgError> {
    let bad = |detail: String| PgError::Tls {
        detail: format!("CA file {}: {detail}", path.display()),
    };
    let mut roots = rustls::RootCertStore::empty();
    let certificates = CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))?;
    for certificate in certificates {
        let certificate = certificate.map_err(|e| bad(e.to_string()))?;
        roots
            .add(certificate)
            .map_err(|e| bad(format!("a certificate is not usable: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("it holds no certificate".into()));
    }
    Ok(roots)
}
