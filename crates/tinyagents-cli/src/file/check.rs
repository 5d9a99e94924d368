//! The checks an agents file passes before anything starts: which agent is
//! the main one, models and scripts, references between agents and to MCP
//! servers, side-effect class names, the stores and the endpoint.

use std::collections::BTreeSet;

use tinyagents::models::ModelSpec;
use tinyagents::tools::SideEffects;
use toml::Spanned;

use super::error::{FileError, Source};
use super::schema::{AgentSection, AgentsFile, McpSection, ScriptStep};

/// The side-effect classes a policy may name, as the file spells them.
pub(crate) const SIDE_EFFECTS: [(&str, SideEffects); 8] = [
    ("network_egress", SideEffects::NETWORK_EGRESS),
    ("file_write", SideEffects::FILE_WRITE),
    ("destructive", SideEffects::DESTRUCTIVE),
    ("payment", SideEffects::PAYMENT),
    ("code_execution", SideEffects::CODE_EXECUTION),
    ("messaging", SideEffects::MESSAGING),
    ("credentials", SideEffects::CREDENTIALS),
    ("infrastructure", SideEffects::INFRASTRUCTURE),
];

/// Checks `file`; returns the id of the main agent.
pub(crate) fn check(source: &Source, file: &AgentsFile) -> Result<String, FileError> {
    if file.agents.is_empty() {
        return Err(source.error(
            None,
            "agents",
            "the file declares no agent: expected at least one [agents.ID] table",
        ));
    }
    for (name, server) in &file.mcp {
        check_server(source, name, server)?;
    }
    for (id, agent) in &file.agents {
        check_agent(source, file, id, agent)?;
    }
    check_cycles(source, file)?;
    check_store(source, file)?;
    if let Some(telemetry) = &file.telemetry {
        let endpoint = telemetry.otlp_endpoint.get_ref();
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(source.error(
                Some(telemetry.otlp_endpoint.span()),
                "telemetry.otlp_endpoint",
                format!("'{endpoint}' is not an endpoint: expected an http:// or https:// URL"),
            ));
        }
    }
    main_agent(source, file)
}

fn main_agent(source: &Source, file: &AgentsFile) -> Result<String, FileError> {
    if let Some(main) = &file.main {
        if !file.agents.contains_key(main.get_ref()) {
            return Err(unknown(source, main, "main", "agent", file.agents.keys()));
        }
        return Ok(main.get_ref().clone());
    }
    let called: BTreeSet<&str> = file
        .agents
        .values()
        .flat_map(|a| a.get_ref().agents.iter().map(|s| s.get_ref().as_str()))
        .collect();
    let roots: Vec<&String> = file
        .agents
        .keys()
        .filter(|id| !called.contains(id.as_str()))
        .collect();
    match roots.as_slice() {
        [only] => Ok((*only).clone()),
        _ => Err(source.error(
            None,
            "main",
            format!(
                "several agents could be the one `run` runs ({}): expected `main = \"ID\"` naming one",
                list(roots.iter().map(|s| s.as_str()))
            ),
        )),
    }
}

fn check_server(source: &Source, name: &str, server: &McpSection) -> Result<(), FileError> {
    let key = format!("mcp.{name}");
    match (&server.command, &server.url) {
        (Some(_), Some(url)) => Err(source.error(
            Some(url.span()),
            format!("{key}.url"),
            "a server has either `command` (stdio) or `url` (HTTP), not both",
        )),
        (None, None) => Err(source.error(
            None,
            key,
            "expected `command = \"PROGRAM\"` (stdio) or `url = \"http://…\"` (Streamable HTTP)",
        )),
        (None, Some(url)) if !url.get_ref().starts_with("http") => Err(source.error(
            Some(url.span()),
            format!("{key}.url"),
            format!(
                "'{}' is not a URL: expected http:// or https://",
                url.get_ref()
            ),
        )),
        _ => Ok(()),
    }
}

fn check_agent(
    source: &Source,
    file: &AgentsFile,
    id: &str,
    agent: &Spanned<AgentSection>,
) -> Result<(), FileError> {
    let key = format!("agents.{id}");
    let normalized = tinyagents::orchestrator::normalize_function_name(id);
    if normalized != id {
        return Err(source.error(
            Some(agent.span()),
            key,
            format!(
                "'{id}' is not a usable agent id (letters, digits and '_', at most 64, \
                 since a calling agent sees it as a tool): try '{normalized}'"
            ),
        ));
    }
    let agent = agent.get_ref();
    check_model(source, &key, agent)?;
    for server in &agent.servers {
        if !file.mcp.contains_key(server.get_ref()) {
            return Err(unknown(
                source,
                server,
                &format!("{key}.servers"),
                "MCP server",
                file.mcp.keys(),
            ));
        }
    }
    for callee in &agent.agents {
        if !file.agents.contains_key(callee.get_ref()) {
            return Err(unknown(
                source,
                callee,
                &format!("{key}.agents"),
                "agent",
                file.agents.keys(),
            ));
        }
    }
    for class in &agent.policy.deny_side_effects {
        if side_effect(class.get_ref()).is_none() {
            return Err(unknown(
                source,
                class,
                &format!("{key}.policy.deny_side_effects"),
                "side-effect class",
                SIDE_EFFECTS.iter().map(|(n, _)| *n),
            ));
        }
    }
    Ok(())
}

fn check_model(source: &Source, key: &str, agent: &AgentSection) -> Result<(), FileError> {
    let model = agent.model.get_ref().trim();
    let scripted = model == "scripted" || model.starts_with("scripted:");
    match (&agent.script, scripted) {
        (None, true) => {
            return Err(source.error(
                Some(agent.model.span()),
                format!("{key}.model"),
                "a scripted model needs its answers: expected `script = [{ text = \"…\" }, …]`",
            ));
        }
        (Some(script), false) => {
            return Err(source.error(
                Some(script.span()),
                format!("{key}.script"),
                format!("a script is for `model = \"scripted\"`, and the model is '{model}'"),
            ));
        }
        (Some(script), true) => check_script(source, key, script)?,
        (None, false) if model == "env" => {}
        (None, false) => {
            if let Err(why) = ModelSpec::parse(model) {
                return Err(source.error(
                    Some(agent.model.span()),
                    format!("{key}.model"),
                    format!(
                        "{why}: expected a model spec such as \"openai:gpt-4o\", \
                         \"anthropic:claude-sonnet-4-5\", \"ollama:qwen3:8b\", \"env\" or \"scripted\""
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_script(
    source: &Source,
    key: &str,
    script: &Spanned<Vec<ScriptStep>>,
) -> Result<(), FileError> {
    if script.get_ref().is_empty() {
        return Err(source.error(
            Some(script.span()),
            format!("{key}.script"),
            "the script is empty: expected at least one answer",
        ));
    }
    for (i, step) in script.get_ref().iter().enumerate() {
        let kinds = usize::from(step.text.is_some())
            + usize::from(step.tool.is_some())
            + usize::from(!step.calls.is_empty());
        let at = format!("{key}.script[{i}]");
        if kinds != 1 {
            return Err(source.error(
                Some(script.span()),
                at,
                "expected exactly one of `text` (an answer), `tool` (one call) or `calls` (several)",
            ));
        }
        if step.tool.is_none() && step.arguments.is_some() {
            return Err(source.error(
                Some(script.span()),
                format!("{at}.arguments"),
                "`arguments` go with `tool`",
            ));
        }
        let arguments = step
            .arguments
            .iter()
            .chain(step.calls.iter().filter_map(|c| c.arguments.as_ref()));
        if arguments.into_iter().any(|a| !a.is_object()) {
            return Err(source.error(
                Some(script.span()),
                format!("{at}.arguments"),
                "expected a table of arguments, like `{ message = \"hi\" }`",
            ));
        }
    }
    Ok(())
}

/// Agents calling agents must not go round in a circle.
fn check_cycles(source: &Source, file: &AgentsFile) -> Result<(), FileError> {
    fn visit<'f>(
        file: &'f AgentsFile,
        id: &'f str,
        path: &mut Vec<&'f str>,
    ) -> Option<Vec<&'f str>> {
        if path.contains(&id) {
            let mut cycle = path.clone();
            cycle.push(id);
            return Some(cycle);
        }
        path.push(id);
        let agent = file.agents.get(id)?;
        for callee in &agent.get_ref().agents {
            if let Some(cycle) = visit(file, callee.get_ref(), path) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    for (id, agent) in &file.agents {
        if let Some(cycle) = visit(file, id, &mut Vec::new()) {
            return Err(source.error(
                Some(agent.span()),
                format!("agents.{id}.agents"),
                format!(
                    "agents call each other in a circle ({}): expected a tree of agents",
                    cycle.join(" -> ")
                ),
            ));
        }
    }
    Ok(())
}

fn check_store(source: &Source, file: &AgentsFile) -> Result<(), FileError> {
    let store = &file.store;
    for (key, value) in [
        ("store.ledger", &store.ledger),
        ("store.sessions", &store.sessions),
        ("store.dir", &store.dir),
    ] {
        if let Some(value) = value
            && value.get_ref().contains("://")
        {
            return Err(source.error(
                Some(value.span()),
                key,
                format!(
                    "'{}' is a URL: expected a path (a PostgreSQL store is `[store] url = \"postgres://…\"`)",
                    value.get_ref()
                ),
            ));
        }
    }
    if let Some(url) = &store.url {
        let text = url.get_ref();
        if !(text.starts_with("postgres://")
            || text.starts_with("postgresql://")
            || text.contains("dbname="))
        {
            return Err(source.error(
                Some(url.span()),
                "store.url",
                format!(
                    "'{text}' is not a PostgreSQL connection string: expected `postgres://user@host/db` or `host=… dbname=…`"
                ),
            ));
        }
        if let Some(other) = [&store.dir, &store.ledger, &store.sessions]
            .into_iter()
            .flatten()
            .next()
        {
            return Err(source.error(
                Some(other.span()),
                "store",
                "a store is either a directory of SQLite files (`dir`, `ledger`, `sessions`) or a PostgreSQL database (`url`), not both".to_owned(),
            ));
        }
    }
    Ok(())
}

/// The class a policy names.
pub(crate) fn side_effect(name: &str) -> Option<SideEffects> {
    SIDE_EFFECTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, class)| *class)
}

/// An error for a name that is not one of `known`.
pub(crate) fn unknown<S: AsRef<str>>(
    source: &Source,
    name: &Spanned<String>,
    key: &str,
    what: &str,
    known: impl IntoIterator<Item = S>,
) -> FileError {
    let known: Vec<String> = known.into_iter().map(|s| s.as_ref().to_owned()).collect();
    source.error(
        Some(name.span()),
        key,
        format!(
            "no {what} named '{}': expected one of {}",
            name.get_ref(),
            list(known.iter().map(String::as_str))
        ),
    )
}

/// `a, b, c` (or `none`).
pub(crate) fn list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
