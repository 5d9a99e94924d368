//! The live view in a real terminal: tmux runs the binary in a pane of a
//! server of the test's own; `send-keys` types, `capture-pane` reads the
//! screen.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{BIN, Scratch, long_operation, stdout, team_file};

/// A tmux server of one test, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `command` in a detached 160×50 pane.
    fn start(scratch: &Scratch, command: &str) -> Self {
        let socket = format!(
            "tinyagents-cli-{}-{}",
            std::process::id(),
            scratch.path().display().to_string().len() + rand_suffix()
        );
        let tmux = Self { socket };
        let status = tmux
            .tmux()
            .args(["new-session", "-d", "-x", "160", "-y", "50", "-s", "t"])
            .arg(format!(
                "cd {} && TINYAGENTS_STORE={} {command}; echo EXIT=$?; sleep 600",
                scratch.path().display(),
                scratch.store().display()
            ))
            .env_remove("TINYAGENTS_MODEL")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .status()
            .expect("tmux runs (`cargo xtask peers` installs it)");
        assert!(status.success());
        tmux
    }

    fn tmux(&self) -> Command {
        let mut command = Command::new("tmux");
        command.args(["-L", &self.socket, "-f", "/dev/null"]);
        command
    }

    /// The screen now.
    fn screen(&self) -> String {
        let output = self
            .tmux()
            .args(["capture-pane", "-p", "-t", "t"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits (60 s at most) for a screen `until` accepts; every screen seen
    /// is kept in `seen`.
    fn wait_for(&self, seen: &mut Vec<String>, until: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen();
            seen.push(screen.clone());
            if until(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "never came; last screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let status = self
            .tmux()
            .args(["send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}

fn rand_suffix() -> usize {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as usize)
}

/// Issue 16: on a terminal the run is a live tree (turns, calls with their
/// harness ids, the delegated agent under its call), a call that waits is
/// a prompt showing the tool and its arguments; answering `y` resumes the
/// run in the same process, the long call shows a progress bar while it
/// runs, and the answer is printed at the end.
#[test]
fn the_live_view_shows_the_tree_asks_for_approval_and_finishes() {
    let scratch = Scratch::new();
    let command = format!("{BIN} run {} 'Prepare the release'", team_file().display());
    let tmux = Tmux::start(&scratch, &command);
    let mut seen = Vec::new();
    let prompt = tmux.wait_for(&mut seen, |s| s.contains("approve p3? [y/n]"));
    for expected in [
        "⏸ agent coordinator · run run-",
        "  ✓ turn 1 · 222 tokens (180 in, 42 out)",
        "    ✓ p1 everything_echo",
        "    ✓ p2 specialist",
        "      ✓ agent specialist · run run-",
        "          ✓ p1 everything_get-sum",
        "⏸ p3 everything_trigger-long-running-operation waits for your decision",
        "arguments: {\"duration\":3,\"steps\":6}",
    ] {
        assert!(
            prompt.contains(expected),
            "{expected:?} not on the screen:\n{prompt}"
        );
    }
    tmux.keys(&["y", "Enter"]);
    let end = tmux.wait_for(&mut seen, |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=0"), "{end}");
    assert!(
        end.contains("Release 1.4 is out: 42 changes, the release job finished."),
        "{end}"
    );
    assert!(
        end.contains("✓ p3 everything_trigger-long-running-operation"),
        "{end}"
    );
    // Issue 29: the last tree is the whole run, both segments.
    let last = end.rsplit("approve p3? [y/n]").next().unwrap_or_default();
    for expected in [
        "✓ agent coordinator · run run-",
        "    ✓ p1 everything_echo",
        "          ✓ p1 everything_get-sum",
        "✓ p3 everything_trigger-long-running-operation",
    ] {
        assert!(
            last.contains(expected),
            "{expected:?} not in the last tree:\n{last}"
        );
    }
    // While it ran, the long call had a spinner and a progress bar.
    assert!(
        seen.iter().any(|s| s.lines().any(|l| l
            .contains("p3 everything_trigger-long-running-operation")
            && l.contains("%]")
            || l.contains("p3 everything_trigger-long-running-operation")
                && l.contains("] ")
                && l.contains('%'))),
        "no progress bar was drawn"
    );
    assert!(
        seen.iter().any(|s| s.lines().any(|l| l
            .contains("p3 everything_trigger-long-running-operation")
            && ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"]
                .iter()
                .any(|f| l.contains(f)))),
        "no spinner was drawn"
    );
}

/// Issue 16: Ctrl-C in the live view cancels the run: the tree says so,
/// the process exits with 130, and the ledger has no call left started.
#[test]
fn ctrl_c_in_the_live_view_cancels_the_run() {
    let scratch = Scratch::new();
    let file = long_operation(&scratch, 60);
    let command = format!("{BIN} run {} go", file.display());
    let tmux = Tmux::start(&scratch, &command);
    let mut seen = Vec::new();
    tmux.wait_for(&mut seen, |s| {
        s.contains("everything_trigger-long-running-operation") && s.contains('%')
    });
    tmux.keys(&["C-c"]);
    let end = tmux.wait_for(&mut seen, |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=130"), "{end}");
    assert!(
        end.contains("cancelling the run (Ctrl-C again exits at once)"),
        "{end}"
    );
    assert!(
        end.contains("■ agent ops · run run-") && end.contains("· cancelled"),
        "{end}"
    );
    let runs = stdout(&scratch.run(&["runs"]));
    assert!(runs.contains("cancelled"), "{runs}");
}

/// Issue 29: Ctrl-C at the approval prompt leaves the run waiting and
/// exits with 3 (awaiting approval), not 130; the run is still there to
/// approve and resume.
#[test]
fn ctrl_c_at_the_approval_prompt_leaves_the_run_waiting_with_exit_3() {
    let scratch = Scratch::new();
    let command = format!("{BIN} run {} 'Prepare the release'", team_file().display());
    let tmux = Tmux::start(&scratch, &command);
    let mut seen = Vec::new();
    tmux.wait_for(&mut seen, |s| s.contains("approve p3? [y/n]"));
    tmux.keys(&["C-c"]);
    let end = tmux.wait_for(&mut seen, |s| s.contains("EXIT="));
    assert!(end.contains("EXIT=3"), "{end}");
    let runs = stdout(&scratch.run(&["runs"]));
    assert!(runs.contains("awaiting_approval"), "{runs}");
}
