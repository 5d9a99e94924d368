//! Writing HTML: escaping, and the frame every page shares.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// `text` made safe inside HTML text and quoted attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    push_esc(&mut out, text);
    out
}

/// Appends `text`, escaped, to `out`.
pub(crate) fn push_esc(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// What [`url_part`] escapes: everything but RFC 3986's unreserved
/// characters.
const URL_PART: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` made safe as one part of a URL path or query.
pub(crate) fn url_part(text: &str) -> String {
    utf8_percent_encode(text, URL_PART).to_string()
}

/// What the frame of a page shows around its body.
pub(crate) struct Frame<'a> {
    /// The page's title.
    pub(crate) title: &'a str,
    /// Which tab is current (`runs`, `inbox`, `doubt`, `sessions`).
    pub(crate) tab: &'a str,
    /// Calls waiting for a decision, across runs.
    pub(crate) waiting: usize,
    /// Calls in doubt, across runs.
    pub(crate) in_doubt: usize,
    /// Who decides here.
    pub(crate) operator: &'a str,
    /// Where the stores are.
    pub(crate) store: &'a str,
}

/// A whole page: the frame around `body`.
pub(crate) fn page(frame: &Frame<'_>, body: &str) -> String {
    let tab = |name: &str, href: &str, label: String| {
        format!(
            r#"<a href="{href}" class="tab{}" data-tab="{name}">{label}</a>"#,
            if frame.tab == name { " current" } else { "" }
        )
    };
    let count = |n: usize| {
        if n == 0 {
            String::new()
        } else {
            format!(r#" <span class="count">{n}</span>"#)
        }
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · tinyagents</title>
<link rel="stylesheet" href="/assets/console.css">
<script src="/assets/console.js" defer></script>
</head><body>
<header><span class="brand">tinyagents</span>
<nav>{runs}{inbox}{doubt}{sessions}</nav>
<span class="who">{operator} · {store}</span></header>
<main>
{body}
</main></body></html>
"#,
        title = esc(frame.title),
        runs = tab("runs", "/", "Runs".to_owned()),
        inbox = tab(
            "inbox",
            "/inbox",
            format!("Approvals{}", count(frame.waiting))
        ),
        doubt = tab(
            "doubt",
            "/doubt",
            format!("In doubt{}", count(frame.in_doubt))
        ),
        sessions = tab("sessions", "/sessions", "Sessions".to_owned()),
        operator = esc(frame.operator),
        store = esc(frame.store),
    )
}

/// A page with no frame: a refusal or an error.
pub(crate) fn bare_page(title: &str, text: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{t} · tinyagents</title>
<link rel="stylesheet" href="/assets/console.css"></head>
<body><main class="refusal"><h1>{t}</h1><p>{x}</p></main></body></html>
"#,
        t = esc(title),
        x = esc(text)
    )
}

/// A duration in milliseconds, as a person reads it.
pub(crate) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::{duration, esc, url_part};

    #[test]
    fn text_is_escaped_for_html_and_urls() {
        assert_eq!(
            esc(r#"<script>alert("x") & 'y'</script>"#),
            "&lt;script&gt;alert(&quot;x&quot;) &amp; &#39;y&#39;&lt;/script&gt;"
        );
        assert_eq!(url_part("run 1/p1?x"), "run%201%2Fp1%3Fx");
        assert_eq!(duration(12), "12 ms");
        assert_eq!(duration(1500), "1.5 s");
        assert_eq!(duration(61_000), "1 min 1 s");
    }
}
