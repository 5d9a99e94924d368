//! `Export::install`: the global subscriber in one call, and the guard
//! that flushes at the end.

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;

use crate::error::OtelError;
use crate::export::Export;
use crate::layer::layer;

impl Export {
    /// Sets the global `tracing` subscriber: a registry with the OTLP
    /// [`layer`] and, when `RUST_LOG` is set, a log of events and spans to
    /// stderr filtered by it (`target=level,…` or a bare level; the fmt
    /// layer sees nothing otherwise). Keep the guard: its
    /// [`shutdown`](OtelGuard::shutdown) (or its drop) flushes what is
    /// buffered.
    ///
    /// A bad endpoint, protocol or header is an error naming it, and so is
    /// a global subscriber set before (nothing is replaced): compose
    /// [`Export::provider`] and [`layer`] into that one instead.
    pub fn install(self) -> Result<OtelGuard, OtelError> {
        let endpoint = self.endpoint.clone();
        let log = log_layer()?;
        let provider = self.provider()?;
        let subscriber = tracing_subscriber::registry()
            .with(layer(&provider))
            .with(log);
        if tracing::subscriber::set_global_default(subscriber).is_err() {
            let _ = provider.shutdown();
            return Err(OtelError::SubscriberAlreadySet { endpoint });
        }
        Ok(OtelGuard {
            provider: Some(provider),
            endpoint,
        })
    }
}

/// The stderr log `RUST_LOG` asks for, if it is set.
fn log_layer<S>() -> Result<Option<impl Layer<S>>, OtelError>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let Some(value) = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
    else {
        return Ok(None);
    };
    let filter: Targets = value
        .parse()
        .map_err(
            |e: tracing_subscriber::filter::ParseError| OtelError::InvalidLogFilter {
                value: value.clone(),
                reason: e.to_string(),
                source: Some(e.into()),
            },
        )?;
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    Ok(Some(log))
}

/// Flushes the export at the end of the program: call
/// [`shutdown`](Self::shutdown) to learn whether the last spans went out;
/// dropping the guard flushes too, and ignores a failure.
///
/// Shutting down blocks the calling thread until the batch is sent (at most
/// the export timeout, 10 s). Over HTTP the export runs on threads of its
/// own, so any runtime may call it; a gRPC export needs its Tokio runtime
/// to make progress meanwhile (call it from a multi-thread runtime, or
/// through `spawn_blocking`).
#[derive(Debug)]
#[must_use = "dropping the guard shuts the export down"]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
    endpoint: String,
}

impl OtelGuard {
    /// Flushes what is buffered and stops the export.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        match self.provider.take() {
            Some(provider) => provider.shutdown().map_err(|e| OtelError::Shutdown {
                endpoint: self.endpoint.clone(),
                reason: e.to_string(),
                source: Some(e.into()),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Best effort: a drop cannot report.
            let _ = provider.shutdown();
        }
    }
}
