//! A turn's arguments, lent: the transcript keeps the only copy of a
//! model-issued call's arguments.
//!
//! A call whose arguments are ready as sent (`CallPath::ready_as_sent`)
//! runs with exactly what the model wrote, so the transcript's copy and the
//! call's would be equal. When nothing can read the transcript while the
//! turn runs, the assistant message is written with those calls'
//! arguments left out (`Null`), the slots hold them, the tools borrow them
//! (`Tool::execute_borrowed`), and the fold gives each back to its place in
//! the message as the call is answered: one copy instead of two.
//!
//! Nothing reads the transcript during a turn unless one of these is so:
//! a ledger (the turn's checkpoint is written before its calls run), an
//! active redaction (the transcript's copy differs from the call's), or a
//! middleware hook that is given the run's state while calls are admitted,
//! settled or nested (`before_tool`, `after_tool`, and with nesting on
//! `check_nested_tool` and `observe_nested_result`), unless the hook mask
//! knows it for a provided one. Any of them and the turn copies as before.
//!
//! Every way a turn ends gives the arguments back before the transcript is
//! read again: the fold (every slot, whatever it became), and a turn that
//! admission ends early (`InvalidArgsPolicy::Fail`), from the slots it
//! leaves. A call that waits for a person keeps its own copy as well.

use serde_json::Value;
use tinyagents_core::{CallId, Message, TinyAgentsError, ToolCall};
use tinyagents_middleware::Hook;
use tinytools::RegisteredTool;

use super::Run;
use super::turn::Slot;

/// Which calls of the turn whose assistant message is at `at` lent their
/// arguments: one bit per call, the first 64 inline.
#[derive(Debug, Default)]
pub(crate) struct Lent {
    at: usize,
    first: u64,
    more: Vec<u64>,
}

impl Lent {
    /// Marks for the turn whose assistant message will be at `at`.
    pub(crate) fn at(at: usize) -> Self {
        Self {
            at,
            ..Self::default()
        }
    }

    /// Marks the `k`th call as lent.
    pub(crate) fn mark(&mut self, k: usize) {
        let (word, bit) = (k / 64, 1u64 << (k % 64));
        if word == 0 {
            self.first |= bit;
        } else {
            if self.more.len() < word {
                self.more.resize(word, 0);
            }
            self.more[word - 1] |= bit;
        }
    }

    /// Whether any call is marked.
    pub(crate) fn any(&self) -> bool {
        self.first != 0 || self.more.iter().any(|w| *w != 0)
    }

    /// Clears the `k`th call's mark; whether it was set.
    fn take(&mut self, k: usize) -> bool {
        let (word, bit) = (k / 64, 1u64 << (k % 64));
        let marks = match word {
            0 => &mut self.first,
            _ => match self.more.get_mut(word - 1) {
                Some(marks) => marks,
                None => return false,
            },
        };
        let was = *marks & bit != 0;
        *marks &= !bit;
        was
    }
}

/// One issued call's admission: its place, its tool when its arguments are
/// ready as sent, and the turn's calls a recovery must not run again or
/// whose redaction failed.
#[derive(Clone, Copy)]
pub(crate) struct Issued<'h, 'a> {
    pub(crate) position: usize,
    pub(crate) ready: Option<&'h RegisteredTool>,
    pub(crate) replay_blocked: &'a [CallId],
    pub(crate) refused: &'a [(CallId, TinyAgentsError)],
}

impl Slot<'_> {
    /// The call this slot holds, if any.
    pub(crate) fn into_call(self) -> Option<ToolCall> {
        match self {
            Slot::Issued(call)
            | Slot::Ready(call, _)
            | Slot::Run { call, .. }
            | Slot::Refused { call, .. }
            | Slot::Recorded { call, .. } => Some(call),
            Slot::Pending(pending) => Some(pending.call),
            Slot::Vacant | Slot::Settled(_) => None,
        }
    }
}

impl Run<'_> {
    /// Whether this turn's transcript may lend its calls' arguments: nothing
    /// reads it while the turn runs.
    pub(crate) fn lends_arguments(&self) -> bool {
        let calls = &self.harness.calls;
        let hooks = &calls.middlewares;
        let nesting = self.ctx.limits.max_nested_depth() > 0;
        calls.ledger.is_none()
            && !self.events.redaction().is_active()
            && !hooks.any(Hook::BeforeTool)
            && !hooks.any(Hook::AfterTool)
            && !(nesting
                && (hooks.any(Hook::CheckNestedTool) || hooks.any(Hook::ObserveNestedResult)))
    }

    /// Gives the turn's `k`th call its arguments back in the transcript,
    /// when they were lent (otherwise they are dropped: the transcript has
    /// its own copy).
    pub(crate) fn give_back(&mut self, k: usize, arguments: Value) {
        if let Some(place) = self.lent_place(k) {
            *place = arguments;
        }
    }

    /// [`give_back`](Self::give_back) for arguments the call keeps.
    pub(crate) fn give_back_copy(&mut self, k: usize, arguments: &Value) {
        if let Some(place) = self.lent_place(k) {
            place.clone_from(arguments);
        }
    }

    /// Where the `k`th call's lent arguments go, once: the mark is cleared.
    fn lent_place(&mut self, k: usize) -> Option<&mut Value> {
        let lent = self.lent.as_mut()?;
        if !lent.take(k) {
            return None;
        }
        match self.state.messages.get_mut(lent.at) {
            Some(Message::Assistant { tool_calls, .. }) => {
                tool_calls.get_mut(k).map(|call| &mut call.arguments)
            }
            _ => None,
        }
    }
}
