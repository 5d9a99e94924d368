//! OpenTelemetry export of tinyagents' spans, in one call.
//!
//! The harness opens `tracing` spans named after OpenTelemetry's GenAI
//! semantic conventions (`invoke_agent {agent}`, `chat {model}`,
//! `execute_tool {tool}`, with `gen_ai.*` and `tinyagents.*` attributes;
//! docs/observability.md lists them). This crate sends them to an OTLP
//! receiver: [`Export`] names the receiver (HTTP/protobuf or gRPC, or the
//! `OTEL_EXPORTER_OTLP_*` variables), [`Export::install`] sets the global
//! subscriber and returns the [`OtelGuard`] that flushes at the end, and a
//! host that composes its own subscriber takes [`Export::provider`] and
//! [`layer`].
//!
//! ```no_run
//! # fn main() -> Result<(), tinyagents_otel::OtelError> {
//! let guard = tinyagents_otel::Export::http("http://127.0.0.1:6006/v1/traces")
//!     .service_name("my-agents")
//!     .install()?;
//! // … run agents …
//! guard.shutdown()?; // flushes what is buffered
//! # Ok(())
//! # }
//! ```
//!
//! It is not where spans are made (the harness makes them, whether or not
//! anything exports them) nor a metrics or logs exporter: traces only.

mod error;
mod export;
mod install;
mod layer;

pub use error::OtelError;
pub use export::{Export, Protocol};
pub use install::OtelGuard;
pub use layer::layer;

/// The provider [`Export::provider`] builds and [`layer`] reads.
pub use opentelemetry_sdk::trace::SdkTracerProvider;

/// The OpenTelemetry SDK this crate is built on (0.33), for hosts that
/// configure a provider of their own.
pub use opentelemetry_sdk;
/// `tracing-subscriber` (0.3), whose registry [`layer`] goes on.
pub use tracing_subscriber;
