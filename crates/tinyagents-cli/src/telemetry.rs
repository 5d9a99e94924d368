//! OTLP export of a run's spans: the agents file's `[telemetry]`, or the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` when the file has none.

use tinyagents::otel::{Export, OtelGuard};

use crate::file::{Loaded, Protocol};

/// The export of one command, flushed by [`finish`].
pub(crate) struct Telemetry {
    guard: OtelGuard,
}

/// Sets up the export the file (or the environment) asks for; a bad
/// endpoint is an error at the file's `telemetry.otlp_endpoint`.
pub(crate) fn install(loaded: &Loaded) -> anyhow::Result<Option<Telemetry>> {
    let export = match &loaded.file.telemetry {
        Some(section) => {
            let endpoint = section.otlp_endpoint.get_ref();
            let export = match section.protocol {
                Protocol::Http => Export::http(endpoint),
                Protocol::Grpc => Export::grpc(endpoint),
            };
            let name = section.service_name.as_deref().unwrap_or("tinyagents");
            let guard = export.service_name(name).install().map_err(|error| {
                loaded.source.error(
                    Some(section.otlp_endpoint.span()),
                    "telemetry.otlp_endpoint",
                    error.to_string(),
                )
            })?;
            return Ok(Some(Telemetry { guard }));
        }
        None => match Export::from_env() {
            Some(export) => export,
            None => return Ok(None),
        },
    };
    let guard = export
        .install()
        .map_err(|error| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: {error}"))?;
    Ok(Some(Telemetry { guard }))
}

/// Flushes the spans still buffered (off the runtime's threads: the
/// shutdown blocks until the batch is sent, and a gRPC export needs the
/// runtime meanwhile). A failure is a warning: the run is done either way.
pub(crate) async fn finish(telemetry: Option<Telemetry>) {
    let Some(Telemetry { guard }) = telemetry else {
        return;
    };
    match tokio::task::spawn_blocking(move || guard.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => eprintln!("warning: exporting the run's spans: {error}"),
        Err(error) => eprintln!("warning: exporting the run's spans: {error}"),
    }
}
