//! `Export`: where spans go (an OTLP endpoint, over HTTP/protobuf or gRPC),
//! named in code or read from the `OTEL_EXPORTER_OTLP_*` variables, and the
//! tracer provider that sends them there.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use tinyagents_core::ErrorSource;

use crate::error::OtelError;

/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The path an OTLP/HTTP receiver takes traces on.
const TRACES_PATH: &str = "/v1/traces";

/// The service name when neither [`Export::service_name`] nor
/// `OTEL_SERVICE_NAME` gives one.
const DEFAULT_SERVICE_NAME: &str = "tinyagents";

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP over HTTP, protobuf bodies (`http/protobuf`): POST to the
    /// endpoint as given (`…/v1/traces`). `http://` or `https://` (rustls on
    /// ring, the platform's roots).
    HttpProtobuf,
    /// OTLP over gRPC (tonic), plaintext `http://` only (a local collector).
    Grpc,
}

impl Protocol {
    fn as_str(self) -> &'static str {
        match self {
            Self::HttpProtobuf => "http/protobuf",
            Self::Grpc => "grpc",
        }
    }
}

/// Where a host's spans are exported: an OTLP endpoint, its protocol, the
/// service name and extra headers. Build one, then [`install`](Self::install)
/// it (one call: the global subscriber) or take its
/// [`provider`](Self::provider) for a subscriber of your own. Nothing is
/// checked until then: a bad endpoint is an [`OtelError`] naming it.
#[derive(Debug, Clone)]
pub struct Export {
    pub(crate) endpoint: String,
    protocol: Protocol,
    /// A protocol `OTEL_EXPORTER_OTLP_PROTOCOL` named that is not supported.
    unsupported: Option<String>,
    service_name: Option<String>,
    headers: Vec<(String, String)>,
}

impl Export {
    fn new(endpoint: String, protocol: Protocol) -> Self {
        Self {
            endpoint,
            protocol,
            unsupported: None,
            service_name: None,
            headers: Vec::new(),
        }
    }

    /// OTLP over HTTP/protobuf to `endpoint`, the full URL of the traces
    /// resource (e.g. `http://127.0.0.1:6006/v1/traces`).
    pub fn http(endpoint: impl Into<String>) -> Self {
        Self::new(endpoint.into(), Protocol::HttpProtobuf)
    }

    /// OTLP over gRPC to `endpoint` (e.g. `http://127.0.0.1:4317`). Needs a
    /// Tokio runtime where the provider is built and while it exports.
    pub fn grpc(endpoint: impl Into<String>) -> Self {
        Self::new(endpoint.into(), Protocol::Grpc)
    }

    /// The export the standard variables ask for, `None` when they name no
    /// endpoint (or `OTEL_SDK_DISABLED` is `true`):
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is), else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (over HTTP, `/v1/traces` is appended
    /// unless the URL already ends with it); the protocol from
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`
    /// (`http/protobuf`, the default, or `grpc`; another is an error at
    /// install). The exporter itself also reads `OTEL_EXPORTER_OTLP_HEADERS`
    /// (and `…_TRACES_HEADERS`), and the resource `OTEL_SERVICE_NAME` and
    /// `OTEL_RESOURCE_ATTRIBUTES`.
    pub fn from_env() -> Option<Self> {
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Self::from_env`] over any source of variables.
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".to_owned());
        let (protocol, unsupported) = match protocol.as_str() {
            "http/protobuf" => (Protocol::HttpProtobuf, None),
            "grpc" => (Protocol::Grpc, None),
            _ => (Protocol::HttpProtobuf, Some(protocol)),
        };
        let endpoint = match set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(endpoint) => endpoint,
            None => {
                let base = set("OTEL_EXPORTER_OTLP_ENDPOINT")?;
                match protocol {
                    Protocol::HttpProtobuf => traces_url(&base),
                    Protocol::Grpc => base,
                }
            }
        };
        let mut export = Self::new(endpoint, protocol);
        export.unsupported = unsupported;
        Some(export)
    }

    /// The service name (`service.name`) spans are reported under; by
    /// default `OTEL_SERVICE_NAME`, else `tinyagents`.
    #[must_use]
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Adds a header to every export request (gRPC: metadata), e.g. an
    /// API key.
    #[must_use]
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((key.into(), value.into()));
        self
    }

    /// The endpoint spans go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The transport.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// A tracer provider exporting to the endpoint through a batch span
    /// processor (its own thread), for a host that composes its own
    /// subscriber with [`layer`](crate::layer). Shut it down (or drop
    /// every clone) to flush what it holds.
    pub fn provider(self) -> Result<SdkTracerProvider, OtelError> {
        let exporter = self.exporter()?;
        let name = self
            .service_name
            .or_else(|| std::env::var("OTEL_SERVICE_NAME").ok())
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        let resource = Resource::builder().with_service_name(name).build();
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build())
    }

    fn exporter(&self) -> Result<opentelemetry_otlp::SpanExporter, OtelError> {
        self.check()?;
        let headers = self.header_map()?;
        let failed = |reason: String, source: Option<ErrorSource>| OtelError::Exporter {
            endpoint: self.endpoint.clone(),
            protocol: self.protocol.as_str(),
            reason,
            source,
        };
        let builder = opentelemetry_otlp::SpanExporter::builder();
        let built = match self.protocol {
            Protocol::HttpProtobuf => {
                let headers = headers
                    .iter()
                    .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
                    .collect::<HashMap<_, _>>();
                builder
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(&self.endpoint)
                    .with_timeout(EXPORT_TIMEOUT)
                    .with_headers(headers)
                    .with_http_client(http_client().map_err(|reason| failed(reason, None))?)
                    .build()
            }
            Protocol::Grpc => {
                if tokio::runtime::Handle::try_current().is_err() {
                    return Err(OtelError::NoRuntime {
                        endpoint: self.endpoint.clone(),
                    });
                }
                let metadata =
                    opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers);
                builder
                    .with_tonic()
                    .with_endpoint(&self.endpoint)
                    .with_timeout(EXPORT_TIMEOUT)
                    .with_metadata(metadata)
                    .build()
            }
        };
        built.map_err(|e| failed(e.to_string(), Some(ErrorSource::new(e))))
    }

    /// The endpoint is an absolute `http`/`https` URL with a host, and the
    /// protocol one this crate speaks.
    fn check(&self) -> Result<(), OtelError> {
        if let Some(protocol) = &self.unsupported {
            return Err(OtelError::UnsupportedProtocol {
                endpoint: self.endpoint.clone(),
                protocol: protocol.clone(),
            });
        }
        let invalid = |reason: String, source: Option<ErrorSource>| OtelError::InvalidEndpoint {
            endpoint: self.endpoint.clone(),
            reason,
            source,
        };
        let url = reqwest::Url::parse(&self.endpoint)
            .map_err(|e| invalid(e.to_string(), Some(ErrorSource::new(e))))?;
        let expected = match (url.scheme(), self.protocol) {
            ("http" | "https", Protocol::HttpProtobuf) | ("http", Protocol::Grpc) => None,
            ("https", Protocol::Grpc) => Some(
                "gRPC export is plaintext here (http://, a local collector); export over HTTP for https",
            ),
            _ => Some("use http:// or https://"),
        };
        if let Some(expected) = expected {
            return Err(OtelError::UnsupportedScheme {
                endpoint: self.endpoint.clone(),
                scheme: url.scheme().to_owned(),
                expected,
            });
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("it names no host".to_owned(), None));
        }
        Ok(())
    }

    fn header_map(&self) -> Result<HeaderMap, OtelError> {
        let mut map = HeaderMap::new();
        for (key, value) in &self.headers {
            let invalid = |error: ErrorSource| OtelError::InvalidHeader {
                endpoint: self.endpoint.clone(),
                key: key.clone(),
                reason: error.to_string(),
                source: Some(error),
            };
            let name = HeaderName::from_bytes(key.to_ascii_lowercase().as_bytes())
                .map_err(|e| invalid(e.into()))?;
            let value = HeaderValue::from_str(value).map_err(|e| invalid(e.into()))?;
            map.append(name, value);
        }
        Ok(map)
    }
}

/// `base` with the traces path appended, unless it ends with it already.
fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        base.to_owned()
    } else {
        format!("{base}{TRACES_PATH}")
    }
}

/// The HTTP exporter's client: reqwest's blocking client (the batch
/// processor exports from its own thread, outside any runtime) with the
/// providers' TLS settings. Built on a thread of its own: building (and
/// dropping) a blocking client inside an async context panics.
fn http_client() -> Result<reqwest::blocking::Client, String> {
    let tls = tinyagents_models::tls_client_config()?;
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "building the HTTP client panicked".to_owned())?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Option<Export> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Export::from_vars(move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn no_endpoint_means_no_export() {
        assert!(vars(&[]).is_none());
        assert!(vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]).is_none());
        let disabled = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert!(vars(&disabled).is_none());
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_over_http_once() {
        for (base, expected) in [
            ("http://h:4318", "http://h:4318/v1/traces"),
            ("http://h:4318/", "http://h:4318/v1/traces"),
            ("http://h:6006/v1/traces", "http://h:6006/v1/traces"),
        ] {
            let export = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", base)]).unwrap();
            assert_eq!(export.endpoint(), expected);
            assert_eq!(export.protocol(), Protocol::HttpProtobuf);
        }
        let grpc = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap();
        assert_eq!(grpc.endpoint(), "http://h:4317");
        assert_eq!(grpc.protocol(), Protocol::Grpc);
        let traces = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:1"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:9/custom"),
        ])
        .unwrap();
        assert_eq!(traces.endpoint(), "http://h:9/custom");
    }

    #[test]
    fn bad_endpoints_protocols_and_headers_are_errors_naming_them() {
        let error = Export::http("not a url").check().unwrap_err();
        assert!(
            matches!(&error, OtelError::InvalidEndpoint { endpoint, .. } if endpoint == "not a url")
        );
        assert!(error.to_string().contains("'not a url'"), "{error}");
        let error = Export::http("ftp://h/v1/traces").check().unwrap_err();
        assert!(matches!(error, OtelError::UnsupportedScheme { scheme, .. } if scheme == "ftp"));
        let error = Export::grpc("https://h:4317").check().unwrap_err();
        assert!(matches!(error, OtelError::UnsupportedScheme { scheme, .. } if scheme == "https"));
        let json = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap();
        let error = json.check().unwrap_err();
        assert!(
            matches!(error, OtelError::UnsupportedProtocol { protocol, .. } if protocol == "http/json")
        );
        let error = Export::http("http://h/v1/traces")
            .header("bad header", "x")
            .header_map()
            .unwrap_err();
        assert!(matches!(error, OtelError::InvalidHeader { key, .. } if key == "bad header"));
    }

    #[test]
    fn grpc_outside_a_runtime_is_an_error_not_a_panic() {
        let error = Export::grpc("http://127.0.0.1:4317")
            .provider()
            .unwrap_err();
        assert!(matches!(error, OtelError::NoRuntime { .. }), "{error}");
    }
}
