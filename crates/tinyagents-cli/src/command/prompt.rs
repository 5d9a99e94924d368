//! Asking a person at the terminal about each waiting call: the tool, the
//! reason, and the arguments when the file captures tool payloads (as the
//! suspended state keeps them: redacted).

use tinyagents::harness::SuspendedRun;
use tinyagents::runs::Decision;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::signal::Interrupt;

/// A decision for every waiting call of `suspended`, or `None` when Ctrl-C
/// (or the end of input) came first.
pub(crate) async fn decide(
    suspended: &SuspendedRun,
    show_arguments: bool,
    interrupt: &Interrupt,
) -> Option<Vec<Decision>> {
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let mut decisions = Vec::new();
    for pending in suspended.pending() {
        let arguments = if show_arguments {
            format!("arguments: {}", pending.call.arguments)
        } else {
            "arguments not shown ([capture] tool_io is off)".to_owned()
        };
        say(&format!(
            "\n⏸ {} {} waits for your decision\n  why: {}\n  {arguments}\n",
            pending.call.id, pending.call.name, pending.reason
        ))
        .await;
        let decision = loop {
            say(&format!("approve {}? [y/n] ", pending.call.id)).await;
            let answer = read(&mut input, interrupt).await?;
            match answer.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => break Decision::approve(pending.call.id.clone()),
                "n" | "no" => {
                    say("reason (optional): ").await;
                    let reason = read(&mut input, interrupt).await?;
                    let reason = reason.trim();
                    let reason = if reason.is_empty() {
                        "denied at the terminal"
                    } else {
                        reason
                    };
                    break Decision::deny(pending.call.id.clone(), reason);
                }
                _ => say("answer y or n\n").await,
            }
        };
        decisions.push(decision);
    }
    Some(decisions)
}

async fn read(
    input: &mut tokio::io::Lines<BufReader<tokio::io::Stdin>>,
    interrupt: &Interrupt,
) -> Option<String> {
    tokio::select! {
        line = input.next_line() => line.ok().flatten(),
        () = interrupt.wait() => None,
    }
}

async fn say(text: &str) {
    let mut stdout = tokio::io::stdout();
    let _ = stdout.write_all(text.as_bytes()).await;
    let _ = stdout.flush().await;
}
