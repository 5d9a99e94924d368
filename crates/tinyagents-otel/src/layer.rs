//! `layer`: the `tracing-opentelemetry` layer configured for tinyagents'
//! spans.

use opentelemetry::InstrumentationScope;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// Crates whose spans are never exported: the exporter's own HTTP and gRPC
/// stack (exporting the spans of an export would feed itself) and the SDK.
const QUIET: [&str; 6] = ["h2", "hyper", "tonic", "tower", "reqwest", "opentelemetry"];

/// The layer that turns `tracing` spans into OpenTelemetry spans on
/// `provider`'s tracer (scope `tinyagents`): spans at `INFO` and above
/// (the harness's spans are `INFO`), except those of the exporter's own
/// HTTP and gRPC stack; `otel.name` names them and `otel.status_*` sets
/// their status, as the harness's spans use them; no source-location,
/// thread or busy/idle attributes. Put it on a `tracing_subscriber`
/// registry.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let scope = InstrumentationScope::builder("tinyagents")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let filter = QUIET.iter().fold(
        Targets::new().with_default(LevelFilter::INFO),
        |filter, quiet| filter.with_target(*quiet, LevelFilter::OFF),
    );
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        .with_filter(filter)
}
