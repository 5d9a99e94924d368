//! The model providers through the facade: credential hygiene against a
//! server that echoes what it receives, and (in `interop`) both clients
//! against a real third-party server, `@copilotkit/aimock`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod aimock;
mod credentials;
mod interop;
mod typed;
