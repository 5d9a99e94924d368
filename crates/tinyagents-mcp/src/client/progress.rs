//! Where each call's progress notifications go.
//!
//! rmcp gives a request its progress token only as it sends it, so a fast
//! server's first notifications can arrive before the call has registered
//! where they go. Those wait here, a bounded number of tokens, until the
//! call registers; tokens nobody registers (a call made without a run
//! context, progress after the answer) are evicted oldest first.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tinytools::ToolRunContext;

/// How many unregistered tokens keep their early notifications.
const EARLY_TOKENS: usize = 64;
/// How many early notifications one token keeps.
const EARLY_PER_TOKEN: usize = 16;

#[derive(Default)]
struct Routes {
    calls: HashMap<ProgressToken, ToolRunContext>,
    early: HashMap<ProgressToken, Vec<ProgressNotificationParam>>,
    /// The early tokens, oldest first.
    order: VecDeque<ProgressToken>,
}

/// The progress routes of one connection.
#[derive(Default)]
pub(crate) struct ProgressRoutes(Mutex<Routes>);

impl ProgressRoutes {
    /// Routes `token`'s notifications to `context`, reporting those that
    /// came early first. Reporting happens under the lock, so the call's
    /// progress keeps the server's order.
    pub(crate) fn register(&self, token: ProgressToken, context: ToolRunContext) {
        let mut routes = self.0.lock();
        if let Some(early) = routes.early.remove(&token) {
            routes.order.retain(|t| *t != token);
            for params in early {
                report(&context, params);
            }
        }
        routes.calls.insert(token, context);
    }

    /// Stops routing `token`.
    pub(crate) fn remove(&self, token: &ProgressToken) {
        self.0.lock().calls.remove(token);
    }

    /// Delivers a notification to its call, or keeps it for a call that has
    /// not registered yet.
    pub(crate) fn deliver(&self, params: ProgressNotificationParam) {
        let mut routes = self.0.lock();
        if let Some(context) = routes.calls.get(&params.progress_token) {
            report(context, params);
            return;
        }
        let token = params.progress_token.clone();
        if !routes.early.contains_key(&token) {
            if routes.order.len() >= EARLY_TOKENS
                && let Some(oldest) = routes.order.pop_front()
            {
                routes.early.remove(&oldest);
            }
            routes.order.push_back(token.clone());
        }
        let kept = routes.early.entry(token).or_default();
        if kept.len() < EARLY_PER_TOKEN {
            kept.push(params);
        }
    }
}

/// A notification as the call's progress: `progress / total` as the
/// fraction when the server gives a total.
fn report(context: &ToolRunContext, params: ProgressNotificationParam) {
    let fraction = params
        .total
        .filter(|total| *total > 0.0)
        .map(|total| (params.progress / total).clamp(0.0, 1.0) as f32);
    let message = params.message.unwrap_or_else(|| match params.total {
        Some(total) => format!("{} of {total}", params.progress),
        None => format!("{}", params.progress),
    });
    context.report_progress(fraction, message);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::NumberOrString;
    use tinyagents_core::{CallId, CancellationToken, RunId};

    use super::*;

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    #[test]
    fn early_notifications_reach_the_call_in_order_and_stale_ones_are_evicted() {
        let routes = ProgressRoutes::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let context =
            ToolRunContext::new(RunId::new("r"), CallId::new("p1"), CancellationToken::new())
                .with_progress(Some(Arc::new(move |p: tinytools::ToolProgress| {
                    sink.lock().push(p.message)
                })));
        routes.deliver(ProgressNotificationParam::new(token(1), 1.0).with_message("early"));
        routes.register(token(1), context);
        routes.deliver(ProgressNotificationParam::new(token(1), 2.0).with_message("late"));
        assert_eq!(*seen.lock(), ["early", "late"]);

        for n in 100..100 + EARLY_TOKENS as i64 + 10 {
            routes.deliver(ProgressNotificationParam::new(token(n), 1.0));
        }
        let routes = routes.0.lock();
        assert_eq!(routes.early.len(), EARLY_TOKENS);
        assert!(!routes.early.contains_key(&token(100)));
    }
}
