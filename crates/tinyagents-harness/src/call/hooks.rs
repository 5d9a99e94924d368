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
    /// order (`.rev()` for the `after_*` hooks), each ready to build it.
    pub(crate) fn with(&self, hook: Hook) -> impl DoubleEndedIterator<Item = Site<'_>> {
        let list: &[Hooked] = if self.none(hook) { &[] } else { &self.list };
        list.iter()
            .filter(move |h| !h.is_default(hook))
            .map(move |hooked| Site {
                hooks: self,
                hooked,
                hook,
            })
    }

    /// Whether some middleware's `hook` may do something.
    pub(crate) fn any(&self, hook: Hook) -> bool {
        !self.none(hook) && self.list.iter().any(|h| !h.is_default(hook))
    }

    /// Whether every middleware's `hook` is known to be the provided one.
    fn none(&self, hook: Hook) -> bool {
        self.all_default.load(Ordering::Relaxed) & hook as u8 != 0
    }

    /// Notes, once `hooked`'s `hook` was marked, whether every middleware's
    /// `hook` is now known to be the provided one.
    fn note_marked(&self, hook: Hook) {
        // Marks are set and read here in one total order (`SeqCst`, and
        // only on this rare path): of two middlewares marked at once on two
        // threads, the one marked last sees the other's mark, so the
        // summary is never missed for good.
        if self
            .list
            .iter()
            .all(|h| h.defaults.load(Ordering::SeqCst) & hook as u8 != 0)
        {
            self.all_default.fetch_or(hook as u8, Ordering::Relaxed);
        }
    }
}

/// One middleware's hook, as a call is about to build it.
pub(crate) struct Site<'s> {
    hooks: &'s Hooks,
    hooked: &'s Hooked,
    hook: Hook,
}

impl<'s> Site<'s> {
    /// The name its refusals cite.
    pub(crate) fn name(&self) -> &'s str {
        self.hooked.middleware.name()
    }

    /// Builds (or, for `redact`, runs) the hook with `build`, and marks it
    /// when what was built is the provided one.
    pub(crate) fn build<T>(&self, build: impl FnOnce(&'s (dyn Middleware + 'static)) -> T) -> T {
        let middleware = &*self.hooked.middleware;
        let built = build(middleware);
        if is_default_hook(take_default_hook(), middleware, self.hook) {
            self.hooked
                .defaults
                .fetch_or(self.hook as u8, Ordering::SeqCst);
            self.hooks.note_marked(self.hook);
        }
        built
    }
}

impl Hooked {
    fn is_default(&self, hook: Hook) -> bool {
        self.defaults.load(Ordering::Relaxed) & hook as u8 != 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use tinyagents_middleware::{Hook, Middleware};

    use super::Hooks;

    /// A middleware whose hooks are all the provided ones.
    struct Plain;

    impl Middleware for Plain {
        fn name(&self) -> &str {
            "plain"
        }
    }

    /// A middleware that implements `redact`.
    struct Scrubs;

    impl Middleware for Scrubs {
        fn name(&self) -> &str {
            "scrubs"
        }

        fn redact(&self, payload: &mut Value) {
            *payload = json!("scrubbed");
        }
    }

    /// Builds every listed middleware's `redact` once, as a call does.
    fn redact_all(hooks: &Hooks) -> Value {
        let mut payload = json!("secret");
        for site in hooks.with(Hook::Redact) {
            site.build(|m| m.redact(&mut payload));
        }
        payload
    }

    /// Once every middleware's hook was seen to be the provided one, the
    /// list is skipped whole; one middleware that implements it keeps the
    /// walk, and only it is listed.
    #[test]
    fn a_hook_every_middleware_provides_is_skipped_whole() {
        let plain: Vec<Arc<dyn Middleware>> = vec![Arc::new(Plain), Arc::new(Plain)];
        let hooks = Hooks::new(plain);
        assert!(!hooks.none(Hook::Redact), "nothing is known before a call");
        assert_eq!(hooks.with(Hook::Redact).count(), 2);
        assert_eq!(redact_all(&hooks), json!("secret"));
        assert!(hooks.none(Hook::Redact), "both were seen to provide it");
        assert!(!hooks.any(Hook::Redact));
        assert_eq!(hooks.with(Hook::Redact).count(), 0);
        assert!(!hooks.none(Hook::AfterTool), "another hook is not known");

        let mixed: Vec<Arc<dyn Middleware>> = vec![Arc::new(Plain), Arc::new(Scrubs)];
        let hooks = Hooks::new(mixed);
        for _ in 0..2 {
            assert_eq!(redact_all(&hooks), json!("scrubbed"));
        }
        assert!(!hooks.none(Hook::Redact));
        assert!(hooks.any(Hook::Redact));
        let listed: Vec<&str> = hooks.with(Hook::Redact).map(|s| s.name()).collect();
        assert_eq!(listed, ["scrubs"]);
    }
}
