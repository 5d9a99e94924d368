//! The client's transport, routing progress as it is read.
//!
//! rmcp hands each notification to the handler in a task of its own, so a
//! handler may run after a response read later (the last progress of a
//! call lost, its route removed once the call answered) or after a later
//! notification (progress out of order). Progress is routed here instead,
//! as the connection reads each message, in the server's order and before
//! anything read after it.

use std::sync::Arc;

use rmcp::model::{JsonRpcMessage, JsonRpcNotification, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::state::Connection;

/// A transport whose progress notifications go to their calls as read.
pub(crate) struct Routed<T> {
    pub(crate) inner: T,
    pub(crate) connection: Arc<Connection>,
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Routed<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await?;
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ServerNotification::ProgressNotification(progress),
            ..
        }) = &message
        {
            self.connection.progress.deliver(progress.params.clone());
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
