//! The one style sheet and the one script, built into the binary.

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

/// `/assets/console.css`.
pub(crate) async fn css() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/css; charset=utf-8")], CSS)
}

/// `/assets/console.js`.
pub(crate) async fn js() -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/javascript; charset=utf-8")], JS)
}
