//! The TLS settings of tinyagents' HTTPS clients (the providers here, the
//! MCP client's Streamable HTTP): one policy, written once.

use std::sync::{Arc, OnceLock};

use rustls_platform_verifier::BuilderVerifierExt;

/// The TLS settings every HTTPS client of tinyagents shares, built once:
/// rustls on the `ring` provider (passed explicitly, so the process-wide
/// default is left alone), verifying against the platform's certificate
/// store, or against the bundled Mozilla roots where the platform has none
/// (a minimal container). Give it to reqwest with
/// `ClientBuilder::tls_backend_preconfigured`.
pub fn tls_client_config() -> Result<rustls::ClientConfig, String> {
    static CONFIG: OnceLock<Result<rustls::ClientConfig, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let builder = |provider: &Arc<rustls::crypto::CryptoProvider>| {
                rustls::ClientConfig::builder_with_provider(Arc::clone(provider))
                    .with_safe_default_protocol_versions()
                    .map_err(|e| e.to_string())
            };
            match builder(&provider)?.with_platform_verifier() {
                Ok(platform) => Ok(platform.with_no_client_auth()),
                Err(_) => {
                    let roots = rustls::RootCertStore {
                        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
                    };
                    Ok(builder(&provider)?
                        .with_root_certificates(roots)
                        .with_no_client_auth())
                }
            }
        })
        .clone()
}
