//! What a tool sees of the harness: [`ToolExecutionContext`] and the seam
//! through which its nested calls reach the loop.

mod nested;
mod types;

pub(crate) use nested::{NESTED_SCOPE, NestedScope, NestedToolRunner};
pub(crate) use types::RunShared;
pub use types::ToolExecutionContext;
