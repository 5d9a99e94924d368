//! Who may use the console: every request carries its token (a cookie set
//! from the URL printed at start, or `Authorization: Bearer`), names one of
//! the console's own hosts (so a page of another site that resolves its
//! name to this address is refused), and, when it carries an `Origin`,
//! comes from the console itself. A form sent with the cookie must also
//! carry the page's form token and an `Origin`: another site can make a
//! browser send the cookie, never read the form token.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, HOST, LOCATION, ORIGIN,
    REFERRER_POLICY, SET_COOKIE, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse as _, Response};

use crate::console::ConsoleError;
use crate::html;

/// The shortest token accepted.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// How a request showed its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Authed {
    /// The console's cookie: a browser, which another site can drive.
    Cookie,
    /// `Authorization: Bearer`: a program, which no other site can drive.
    Bearer,
}

/// The console's checks.
#[derive(Debug, Clone)]
pub(crate) struct Guard {
    token: Arc<str>,
    form_token: Arc<str>,
    cookie: Arc<str>,
    hosts: Arc<Vec<String>>,
}

impl Guard {
    pub(crate) fn new(token: String, hosts: &[String]) -> Result<Self, ConsoleError> {
        let form_token = new_token()?;
        // A name of this console's own: consoles on other ports of the
        // same host share the host's cookies.
        let cookie = format!("tinyagents_console_{}", &new_token()?[..16]);
        Ok(Self {
            token: token.into(),
            form_token: form_token.into(),
            cookie: cookie.into(),
            hosts: Arc::new(hosts.iter().map(|h| h.to_ascii_lowercase()).collect()),
        })
    }

    /// This guard, also admitting the names of `addr` (and, for a
    /// loopback address, `localhost` and both loopback addresses).
    pub(crate) fn serving(&self, addr: SocketAddr) -> Self {
        let mut hosts: Vec<String> = self.hosts.as_ref().clone();
        let port = addr.port();
        hosts.push(addr.to_string());
        if addr.ip().is_loopback() {
            for name in ["localhost", "127.0.0.1", "[::1]"] {
                hosts.push(format!("{name}:{port}"));
            }
        }
        Self {
            hosts: Arc::new(hosts),
            ..self.clone()
        }
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// The token a page's forms carry.
    pub(crate) fn form_token(&self) -> &str {
        &self.form_token
    }

    /// Whether a form's fields carry the form token, when the request came
    /// with the cookie.
    pub(crate) fn form_allowed(&self, authed: Authed, fields: &[(String, String)]) -> bool {
        authed == Authed::Bearer
            || fields
                .iter()
                .any(|(k, v)| k == "form_token" && same(v, &self.form_token))
    }

    fn host_allowed(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        origin
            .strip_prefix("http://")
            .is_some_and(|rest| self.host_allowed(rest))
    }

    fn cookie_token<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == &*self.cookie)
            .map(|(_, value)| value)
    }
}

/// A new token: 32 random bytes, hex.
pub(crate) fn new_token() -> Result<String, ConsoleError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ConsoleError::Random(e.into()))?;
    Ok(tinyagents_core::hex::encode(&bytes))
}

/// Equal texts, compared in time that depends on their lengths only.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn refuse(status: StatusCode, title: &str, text: &str) -> Response {
    let body = html::bare_page(title, text);
    let mut response = (status, Html(body)).into_response();
    harden(response.headers_mut());
    response
}

/// Checks a request against the console's rules, then hardens the answer.
pub(crate) async fn check(
    State(guard): State<Guard>,
    mut request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    let host = headers
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()))
        .unwrap_or_default();
    if !guard.host_allowed(&host) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "Not this console's address",
            &format!(
                "This console answers requests for its own address only, not for '{host}'. \
                 Open the address it printed at start."
            ),
        );
    }
    let origin = headers
        .get(ORIGIN)
        .map(|v| v.to_str().unwrap_or("(not text)").to_owned());
    if let Some(origin) = &origin
        && !guard.origin_allowed(origin)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "Refused: another site",
            &format!(
                "A request from '{origin}' is refused: only the console's own pages may use it."
            ),
        );
    }
    // The token in the address: set as a cookie, and dropped from the
    // address.
    if let Some(query) = request.uri().query()
        && let Some(given) = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("token="))
    {
        if !same(given, &guard.token) {
            return refuse(StatusCode::UNAUTHORIZED, "Wrong token", TOKEN_HELP);
        }
        let rest: Vec<&str> = query
            .split('&')
            .filter(|pair| !pair.starts_with("token="))
            .collect();
        let path = request.uri().path();
        let to = if rest.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{}", rest.join("&"))
        };
        let cookie = format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            guard.cookie, guard.token
        );
        let mut response = StatusCode::SEE_OTHER.into_response();
        let headers = response.headers_mut();
        if let (Ok(to), Ok(cookie)) = (HeaderValue::from_str(&to), HeaderValue::from_str(&cookie)) {
            headers.insert(LOCATION, to);
            headers.insert(SET_COOKIE, cookie);
        }
        harden(headers);
        return response;
    }
    let bearer = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let authed = if bearer.is_some_and(|t| same(t.trim(), &guard.token)) {
        Authed::Bearer
    } else if guard
        .cookie_token(headers)
        .is_some_and(|t| same(t, &guard.token))
    {
        Authed::Cookie
    } else {
        return refuse(
            StatusCode::UNAUTHORIZED,
            "This console needs its token",
            TOKEN_HELP,
        );
    };
    let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
    if changes && authed == Authed::Cookie && origin.is_none() {
        return refuse(
            StatusCode::FORBIDDEN,
            "Refused: no origin",
            "A change sent from a browser must say where it comes from (an Origin header); \
             this one did not, so it is refused.",
        );
    }
    request.extensions_mut().insert(authed);
    let mut response = next.run(request).await;
    harden(response.headers_mut());
    response
}

const TOKEN_HELP: &str = "Open the address the console printed when it started (it carries the \
    token), or send the token as `Authorization: Bearer TOKEN`.";

/// Headers every answer carries: no framing, no scripts or styles from
/// elsewhere, no caching, no referrer to other sites.
fn harden(headers: &mut HeaderMap) {
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // Not `no-referrer`: under it a browser sends `Origin: null` with the
    // console's own forms, which the origin check must refuse.
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Guard, same};

    #[test]
    fn tokens_compare_whole() {
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd") && !same("abc", "abcd") && !same("", "a"));
    }

    #[test]
    fn hosts_and_origins_are_the_consoles_own() {
        let guard = Guard::new("t".repeat(32), &[])
            .unwrap()
            .serving("127.0.0.1:4000".parse().unwrap());
        assert!(guard.host_allowed("localhost:4000") && guard.host_allowed("127.0.0.1:4000"));
        assert!(!guard.host_allowed("evil.example:4000") && !guard.host_allowed("localhost:4001"));
        assert!(guard.origin_allowed("http://localhost:4000"));
        assert!(!guard.origin_allowed("https://localhost:4000"));
        assert!(!guard.origin_allowed("http://evil.example"));
        assert!(!guard.origin_allowed("null"));
    }
}
