//! [`ErrorSource`]: the error underneath another, kept whole.

use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// The error underneath another: what a store, a decoder or the operating
/// system said, kept whole (its type and its own sources), so a host can
/// downcast it, while the error that carries it stays `Clone` and
/// comparable.
///
/// It is made for a `#[source]` field of a `thiserror` enum. It
/// dereferences to the underlying error, so the carrying error's
/// [`Error::source`] is that error itself (downcastable to its type), not
/// this wrapper; for that reason it is not an [`Error`] of its own.
///
/// Two sources are equal when they are the same error or display the same
/// text.
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn Error + Send + Sync + 'static>);

impl ErrorSource {
    /// Keeps `error` as a source.
    pub fn new(error: impl Error + Send + Sync + 'static) -> Self {
        Self(Arc::new(error))
    }

    /// Keeps an already boxed error as a source.
    pub fn from_boxed(error: Box<dyn Error + Send + Sync + 'static>) -> Self {
        Self(Arc::from(error))
    }

    /// The underlying error.
    pub fn get(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The underlying error as an `E`, when it is one.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        self.0.downcast_ref::<E>()
    }
}

impl<E: Error + Send + Sync + 'static> From<E> for ErrorSource {
    fn from(error: E) -> Self {
        Self::new(error)
    }
}

impl Deref for ErrorSource {
    type Target = dyn Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq for ErrorSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ErrorSource {}

/// The text of `error` followed by each of its sources that the text does
/// not already say, joined by `": "`: what `anyhow`'s `{:#}` prints,
/// without saying a cause twice when an error's message already quotes its
/// source (as this framework's errors do, so their texts stay whole for a
/// reader who sees only the top one, and as many libraries' errors do).
pub fn error_chain(error: &(dyn Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("disk full")]
    struct Disk;

    #[derive(Debug, thiserror::Error)]
    #[error("write failed: {source}")]
    struct Write {
        #[source]
        source: ErrorSource,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the run stopped")]
    struct Stopped(#[source] Write);

    #[test]
    fn the_carrying_errors_source_is_the_underlying_error() {
        let error = Write {
            source: ErrorSource::new(Disk),
        };
        let source = error.source().map(|s| s.is::<Disk>());
        assert_eq!(source, Some(true), "not a Disk: {:?}", error.source());
        assert_eq!(
            error.source.downcast_ref::<Disk>().map(|d| d.to_string()),
            Some("disk full".to_owned())
        );
        assert_eq!(error.source.clone(), ErrorSource::new(Disk));
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let error = Stopped(Write {
            source: ErrorSource::new(Disk),
        });
        assert_eq!(
            error_chain(&error),
            "the run stopped: write failed: disk full"
        );
    }
}
