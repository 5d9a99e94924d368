//! `OtelError`: why an export could not be set up or flushed.

/// Why an export could not be set up, installed or flushed. Each names the
/// endpoint or the setting at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// The endpoint is not an absolute URL.
    #[error("OTLP endpoint '{endpoint}' is not a URL: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// What the URL parser said.
        reason: String,
        /// The error underneath (`reason` already says it), when one was
        /// met.
        #[source]
        source: Option<tinyagents_core::ErrorSource>,
    },
    /// The endpoint's scheme is not one this exporter speaks.
    #[error("OTLP endpoint '{endpoint}' has scheme '{scheme}': {expected}")]
    UnsupportedScheme {
        /// The endpoint as given.
        endpoint: String,
        /// Its scheme.
        scheme: String,
        /// What would do.
        expected: &'static str,
    },
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (or its traces variant) names a protocol
    /// this exporter does not speak.
    #[error(
        "OTLP protocol '{protocol}' (for endpoint '{endpoint}') is not supported: use http/protobuf or grpc"
    )]
    UnsupportedProtocol {
        /// The endpoint.
        endpoint: String,
        /// The protocol as given.
        protocol: String,
    },
    /// A header is not a valid HTTP header (or gRPC metadata) name or value.
    #[error("OTLP header '{key}' for endpoint '{endpoint}' is not valid: {reason}")]
    InvalidHeader {
        /// The endpoint.
        endpoint: String,
        /// The header's name.
        key: String,
        /// What was wrong.
        reason: String,
        /// The error underneath (`reason` already says it), when one was
        /// met.
        #[source]
        source: Option<tinyagents_core::ErrorSource>,
    },
    /// gRPC export was asked for outside a Tokio runtime.
    #[error(
        "OTLP gRPC export to '{endpoint}' needs a Tokio runtime: build it inside one (or export over HTTP)"
    )]
    NoRuntime {
        /// The endpoint.
        endpoint: String,
    },
    /// The exporter (or its HTTP client) could not be built.
    #[error("cannot build the OTLP {protocol} exporter for '{endpoint}': {reason}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// `http/protobuf` or `grpc`.
        protocol: &'static str,
        /// What failed.
        reason: String,
        /// The error underneath (`reason` already says it), when one was
        /// met.
        #[source]
        source: Option<tinyagents_core::ErrorSource>,
    },
    /// `RUST_LOG` is not a filter `install` can read for its log output.
    #[error("RUST_LOG '{value}' is not a filter (target=level,…): {reason}")]
    InvalidLogFilter {
        /// The variable's value.
        value: String,
        /// What the parser said.
        reason: String,
        /// The error underneath (`reason` already says it), when one was
        /// met.
        #[source]
        source: Option<tinyagents_core::ErrorSource>,
    },
    /// A global `tracing` subscriber was set before `install`.
    #[error(
        "a global tracing subscriber is already set, so spans cannot be exported to '{endpoint}' by install: compose Export::provider and tinyagents_otel::layer into that subscriber instead"
    )]
    SubscriberAlreadySet {
        /// The endpoint.
        endpoint: String,
    },
    /// Flushing the buffered spans at shutdown failed.
    #[error("flushing spans to '{endpoint}' failed: {reason}")]
    Shutdown {
        /// The endpoint.
        endpoint: String,
        /// What the SDK said.
        reason: String,
        /// The error underneath (`reason` already says it), when one was
        /// met.
        #[source]
        source: Option<tinyagents_core::ErrorSource>,
    },
}
