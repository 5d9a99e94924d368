//! What is wrong with an agents file, and where: the line, the column, the
//! key and what was expected.

use std::ops::Range;
use std::path::{Path, PathBuf};

/// An agents file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    /// The file cannot be read.
    #[error("{}: cannot read the agents file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key's value is wrong (or the TOML is malformed).
    #[error("{}", render(.0))]
    At(Box<Located>),
}

/// A problem at one place of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Located {
    /// The file.
    pub(crate) path: PathBuf,
    /// 1-based line.
    pub(crate) line: usize,
    /// 1-based column (in characters).
    pub(crate) column: usize,
    /// The key, as a dotted path (`agents.coder.limits.max_tokens`); empty
    /// when the TOML itself is malformed.
    pub(crate) key: String,
    /// What is wrong, saying what was expected.
    pub(crate) problem: String,
    /// The text of the line.
    pub(crate) source_line: String,
}

fn render(at: &Located) -> String {
    let key = if at.key.is_empty() {
        String::new()
    } else {
        format!("{}: ", at.key)
    };
    format!(
        "{}:{}:{}: {key}{}\n{:>5} | {}",
        at.path.display(),
        at.line,
        at.column,
        at.problem,
        at.line,
        at.source_line
    )
}

/// The text of one agents file, for pointing into it.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    path: PathBuf,
    text: String,
}

impl Source {
    /// `text`, read from `path`.
    pub(crate) fn new(path: &Path, text: String) -> Self {
        Self {
            path: path.to_owned(),
            text,
        }
    }

    /// The text.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// An error at `span` (the start of the file when unknown).
    pub(crate) fn error(
        &self,
        span: Option<Range<usize>>,
        key: impl Into<String>,
        problem: impl Into<String>,
    ) -> FileError {
        let start = span.map_or(0, |s| s.start).min(self.text.len());
        let before = self.text.get(..start).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = self
            .text
            .get(line_start..start)
            .map_or(1, |t| t.chars().count() + 1);
        let source_line = self
            .text
            .get(line_start..)
            .and_then(|rest| rest.lines().next())
            .unwrap_or("")
            .to_owned();
        FileError::At(Box::new(Located {
            path: self.path.clone(),
            line,
            column,
            key: key.into(),
            problem: problem.into(),
            source_line,
        }))
    }
}
