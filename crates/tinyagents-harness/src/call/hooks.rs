//! The run's middlewares, each with the provided hooks it was seen to use.
//!
//! A provided hook of [`Middleware`] does nothing, and notes so as it is
//! built (`tinyagents_middleware::take_default_hook`). The first time the
//! harness builds a middleware's hook and finds that note naming that very
//! middleware and hook, it marks the hook here and never builds it again:
//! ten pass-through middlewares cost a mask test per hook, not ten boxed
//! futures. A hook's implementation is fixed by its type, so a mark never
//! goes stale; a hook a middleware implements is never marked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tinyagents_middleware::{Hook, Middleware, is_default_hook, take_default_hook};

/// The middlewares of a harness, in registration order.
pub(crate) struct Hooks {
    list: Box<[Hooked]>,
    /// The hooks every middleware is known to provide: a call skips them
    /// without walking the list.
    all_default: AtomicU8,
}

/// One middleware and the mask of its hooks known to be the provided ones.
pub(crate) struct Hooked {
    middleware: Arc<dyn Middleware>,
    defaults: AtomicU8,
}

impl Hooks {
    pub(crate) fn new(middlewares: Vec<Arc<dyn Middleware>>) -> Self {
        let list = middlewares
            .into_iter()
            .map(|middleware| Hooked {
                middleware,
                defaults: AtomicU8::new(0),
            })
            .collect();
        Self {
            list,
            all_default: AtomicU8::new(0),
        }
    }

    /// How many middlewares there are.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// The middlewares whose `hook` may do something, in registration
    /// order (`.rev()` for the `after_*` hooks).
    pub(crate) fn with(&self, hook: Hook) -> impl DoubleEndedIterator<Item = &Hooked> {
        let list: &[Hooked] = if self.none(hook) { &[] } else { &self.list };
        list.iter().filter(move |h| !h.is_default(hook))
    }

    /// Whether some middleware's `hook` may do something.
    pub(crate) fn any(&self, hook: Hook) -> bool {
        !self.none(hook) && self.list.iter().any(|h| !h.is_default(hook))
    }

    /// Whether every middleware's `hook` is known to be the provided one.
    fn none(&self, hook: Hook) -> bool {
        self.all_default.load(Ordering::Relaxed) & hook as u8 != 0
    }

    /// Builds `hook` of `hooked` (one of this list) with `build`, as
    /// [`Hooked::build`] does, and notes when every middleware's `hook` is
    /// then known to be the provided one.
    pub(crate) fn build<'s, T>(
        &'s self,
        hooked: &'s Hooked,
        hook: Hook,
        build: impl FnOnce(&'s (dyn Middleware + 'static)) -> T,
    ) -> T {
        let (built, marked) = hooked.build_marking(hook, build);
        if marked && self.list.iter().all(|h| h.is_default(hook)) {
            self.all_default.fetch_or(hook as u8, Ordering::Relaxed);
        }
        built
    }
}

impl Hooked {
    /// The name its refusals cite.
    pub(crate) fn name(&self) -> &str {
        self.middleware.name()
    }

    fn is_default(&self, hook: Hook) -> bool {
        self.defaults.load(Ordering::Relaxed) & hook as u8 != 0
    }

    /// Builds (or, for `redact`, runs) `hook` with `build`, and marks the
    /// hook when what was built is the provided one (then `true`).
    fn build_marking<'s, T>(
        &'s self,
        hook: Hook,
        build: impl FnOnce(&'s (dyn Middleware + 'static)) -> T,
    ) -> (T, bool) {
        let middleware = &*self.middleware;
        let built = build(middleware);
        let provided = is_default_hook(take_default_hook(), middleware, hook);
        if provided {
            self.defaults.fetch_or(hook as u8, Ordering::Relaxed);
        }
        (built, provided)
    }
}
