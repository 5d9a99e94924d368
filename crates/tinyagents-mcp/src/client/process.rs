//! A stdio server's process: started with piped stdin and stdout, stopped
//! and reaped whatever happens to the connection.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::remote::{RemoteServer, Transport};
use crate::error::McpError;

/// How long a server whose stdin closed has to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The child process of a stdio server. Dropped without [`stop`], it is
/// killed at once (`kill_on_drop`) and tokio's orphan queue reaps it.
///
/// [`stop`]: ChildServer::stop
pub(crate) struct ChildServer {
    child: Child,
}

impl ChildServer {
    pub(crate) fn spawn(
        server: &RemoteServer,
    ) -> Result<(Self, ChildStdout, ChildStdin), McpError> {
        let Transport::Stdio {
            program,
            args,
            env,
            cwd,
            stderr,
        } = &server.transport
        else {
            return Err(McpError::Config(format!(
                "MCP server '{}' is not a stdio server",
                server.name
            )));
        };
        if program.is_empty() {
            return Err(McpError::Config(format!(
                "MCP server '{}' has an empty program",
                server.name
            )));
        }
        let spawn_failed = |source| McpError::Spawn {
            server: server.name.clone(),
            command: program.to_string_lossy().into_owned(),
            source,
        };
        let stderr = match stderr {
            None => Stdio::inherit(),
            Some(path) => std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .map_err(spawn_failed)?,
        };
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true);
        if let Some(dir) = cwd {
            command.current_dir(dir);
        }
        let mut child = command.spawn().map_err(spawn_failed)?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(spawn_failed(std::io::Error::other(
                "the child's stdin or stdout was not piped",
            )));
        };
        Ok((Self { child }, stdout, stdin))
    }

    pub(crate) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Waits [`EXIT_GRACE`] for the process to exit (its stdin is closed
    /// by now), then kills it; either way it is reaped.
    pub(crate) async fn stop(mut self) {
        if tokio::time::timeout(EXIT_GRACE, self.child.wait())
            .await
            .is_err()
        {
            // `kill` sends SIGKILL and waits for the exit.
            let _ = self.child.kill().await;
        }
    }
}
