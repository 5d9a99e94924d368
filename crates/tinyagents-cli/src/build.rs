//! Builds the agents an agents file declares: connects the MCP servers
//! they use (once per process: [`Toolbox`]), then makes each agent
//! (sub-agents first, exposed as tools of the agents that call them) with
//! its model, tools, policies, limits and the file's prices, over the
//! ledger a run writes through and the store's sessions. A stdio server's
//! stderr goes to `mcp-NAME.log` in the store directory, so its log lines
//! never break the live tree.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tinyagents::core::{ChatModel, LimitBehavior, PayloadCapture};
use tinyagents::ledger::SharedLedger;
use tinyagents::mcp::{McpClient, McpError, McpLock, RemoteServer, Trust};
use tinyagents::middleware::{PlanModeMiddleware, ToolAllowlistMiddleware, ToolPolicyMiddleware};
use tinyagents::orchestrator::{Agent, AgentBuilder, SessionStore};
use tinyagents::tools::{SideEffects, Tool};
use toml::Spanned;

use crate::file::{AgentSection, LimitsSection, Loaded, McpSection, TrustSetting, check};
use crate::script::scripted_model;
use crate::startup;

/// The tools of a file's MCP servers, connected once per process and
/// shared by every agent built from the file (a worker builds one set of
/// agents per run it takes).
pub(crate) struct Toolbox {
    clients: Vec<McpClient>,
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl Toolbox {
    /// Connects the MCP servers the main agent's tree uses; a stdio
    /// server's stderr goes to `mcp-NAME.log` in `logs`.
    pub(crate) async fn connect(loaded: &Loaded, logs: &Path) -> anyhow::Result<Self> {
        let lock = McpLock::read(&lock_path(loaded))?;
        Self::connect_locked(loaded, logs, lock.as_ref()).await
    }

    /// Connects the servers of `loaded`, each pinned to `lock` when given.
    pub(crate) async fn connect_locked(
        loaded: &Loaded,
        logs: &Path,
        lock: Option<&McpLock>,
    ) -> anyhow::Result<Self> {
        let mut toolbox = Self {
            clients: Vec::new(),
            tools: BTreeMap::new(),
        };
        for name in servers_used(loaded) {
            let section = &loaded.file.mcp[&name];
            let log = logs.join(format!("mcp-{name}.log"));
            let mut server = remote(&loaded.dir, &name, section).stderr_to(log.clone());
            if let Some(lock) = lock {
                server = server.locked(lock);
            }
            let client = match McpClient::connect(server).await {
                Ok(client) => client,
                Err(error @ McpError::Drift { .. }) => {
                    toolbox.close().await;
                    return Err(anyhow::anyhow!(
                        "{error} ({}); once reviewed, `tinyagents check {} --write-lock` \
                         pins what the servers list now",
                        lock_path(loaded).display(),
                        loaded.identity.path
                    ));
                }
                Err(error) => {
                    toolbox.close().await;
                    let error = anyhow::Error::new(error);
                    return Err(startup::failure(&name, section, &loaded.dir, &log, &error));
                }
            };
            for tool in client.tools() {
                toolbox.tools.insert(tool.spec().name.clone(), tool);
            }
            toolbox.clients.push(client);
        }
        Ok(toolbox)
    }

    /// Builds the main agent of `loaded` (and, first, the agents it calls)
    /// over `ledger` and `sessions`.
    pub(crate) fn agent(
        &self,
        loaded: &Loaded,
        ledger: SharedLedger,
        sessions: Arc<dyn SessionStore>,
    ) -> anyhow::Result<Agent> {
        self.agent_and_warnings(loaded, ledger, sessions)
            .map(|(agent, _)| agent)
    }

    /// [`agent`](Self::agent), with what the build let through that a
    /// person should know of (each also a `Warning` on every run of the
    /// agent it is about): a model without a price in a file that caps
    /// money.
    pub(crate) fn agent_and_warnings(
        &self,
        loaded: &Loaded,
        ledger: SharedLedger,
        sessions: Arc<dyn SessionStore>,
    ) -> anyhow::Result<(Agent, Vec<String>)> {
        let mut context = Context {
            loaded,
            ledger,
            sessions,
            tools: &self.tools,
            built: BTreeMap::new(),
            warnings: Vec::new(),
        };
        let agent = context.agent(&loaded.main)?;
        Ok((agent, context.warnings))
    }

    /// Pins what each connected server lists now in a lock at `path`.
    pub(crate) fn write_lock(&self, path: &Path) -> anyhow::Result<usize> {
        let mut lock = McpLock::read(path).ok().flatten().unwrap_or_default();
        for client in &self.clients {
            lock.pin(client);
        }
        lock.write(path)?;
        Ok(self.clients.len())
    }

    /// Stops the MCP servers.
    pub(crate) async fn close(self) {
        for client in self.clients {
            client.close().await;
        }
    }
}

/// The MCP servers the main agent's tree uses, in name order.
fn servers_used(loaded: &Loaded) -> Vec<String> {
    let mut used = std::collections::BTreeSet::new();
    let mut todo = vec![loaded.main.clone()];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        let Some(agent) = loaded.file.agents.get(&id) else {
            continue;
        };
        let agent = agent.get_ref();
        used.extend(agent.servers.iter().map(|s| s.get_ref().clone()));
        // A tool named `{prefix}_{tool}` may come from any server: connect
        // each server whose prefix could have made it.
        for tool in &agent.tools {
            for (name, server) in &loaded.file.mcp {
                let prefix = server.prefix.clone().unwrap_or_else(|| name.clone());
                if prefix.is_empty() || tool.get_ref().starts_with(&format!("{prefix}_")) {
                    used.insert(name.clone());
                }
            }
        }
        todo.extend(agent.agents.iter().map(|a| a.get_ref().clone()));
    }
    used.into_iter().collect()
}

fn remote(dir: &Path, name: &str, section: &McpSection) -> RemoteServer {
    let mut server = match (&section.command, &section.url) {
        (Some(command), _) => {
            let cwd = section
                .cwd
                .as_ref()
                .map_or_else(|| dir.to_owned(), |cwd| dir.join(cwd));
            let mut server = RemoteServer::stdio(name, command.get_ref())
                .args(&section.args)
                .current_dir(cwd);
            for (key, value) in &section.env {
                server = server.env(key, value);
            }
            server
        }
        // Invariant: `check` refused a server with neither.
        (None, url) => RemoteServer::http(name, url.as_ref().map_or("", |u| u.get_ref())),
    };
    if let Some(prefix) = &section.prefix {
        server = server.prefix((!prefix.is_empty()).then_some(prefix.as_str()));
    }
    if section.trust == Some(TrustSetting::Trusted) && !section.ignore_annotations {
        server = server.trust(Trust::Trusted);
    }
    if let Some(secs) = section.connect_timeout_secs {
        server = server.connect_timeout(Duration::from_secs(secs));
    }
    if let Some(secs) = section.request_timeout_secs {
        server = server.request_timeout(Duration::from_secs(secs));
    }
    server
}

/// The MCP lock of an agents file: `mcp.lock` beside it.
pub(crate) fn lock_path(loaded: &Loaded) -> std::path::PathBuf {
    loaded.dir.join("mcp.lock")
}

struct Context<'l> {
    loaded: &'l Loaded,
    ledger: SharedLedger,
    sessions: Arc<dyn SessionStore>,
    tools: &'l BTreeMap<String, Arc<dyn Tool>>,
    built: BTreeMap<String, Agent>,
    warnings: Vec<String>,
}

impl Context<'_> {
    /// Builds agent `id` and, first, the agents it calls.
    fn agent(&mut self, id: &str) -> anyhow::Result<Agent> {
        let loaded = self.loaded;
        let source = &loaded.source;
        let section = loaded.file.agents[id].get_ref();
        let key = format!("agents.{id}");
        let model = self.model(id, section)?;
        let model_name = model.name().to_owned();
        let mut builder = Agent::builder(id)
            .model(model)
            .ledger(self.ledger.clone())
            .sessions(self.sessions.clone())
            .payload_capture(PayloadCapture {
                model_io: loaded.file.capture.model_io,
                tool_io: loaded.file.capture.tool_io,
            });
        if let Some(text) = &section.instructions {
            builder = builder.instructions(text.clone());
        }
        let mut names: Vec<String> = Vec::new();
        for server in &section.servers {
            let prefix = server_prefix(loaded, server.get_ref());
            for (name, tool) in self.tools {
                if owned_by(name, prefix.as_deref()) && !names.contains(name) {
                    names.push(name.clone());
                    builder = builder.tools([Arc::clone(tool)]);
                }
            }
        }
        for tool in &section.tools {
            let Some(found) = self.tools.get(tool.get_ref()) else {
                return Err(check::unknown(
                    source,
                    tool,
                    &format!("{key}.tools"),
                    "tool",
                    self.tools.keys(),
                )
                .into());
            };
            if !names.contains(tool.get_ref()) {
                names.push(tool.get_ref().clone());
                builder = builder.tools([Arc::clone(found)]);
            }
        }
        for callee in &section.agents {
            let sub = self.built_agent(callee.get_ref())?;
            let description = loaded.file.agents[callee.get_ref()]
                .get_ref()
                .description
                .clone()
                .unwrap_or_else(|| format!("Asks the agent '{}'.", callee.get_ref()));
            names.push(callee.get_ref().clone());
            builder = builder.tool(sub.as_tool(callee.get_ref(), description));
        }
        builder = policies(loaded, &key, section, &names, builder)?;
        builder = limits(&section.limits, builder);
        builder = self.prices(&key, &model_name, builder);
        let agent = builder
            .build()
            .with_context(|| format!("building agent '{id}' ([{key}])"))?;
        Ok(agent)
    }

    /// Gives the agent the file's prices; warns (on every run of it) when
    /// the file caps money and its model has no price, since a capped
    /// tree refuses the calls of a model it cannot price.
    fn prices(&mut self, key: &str, model: &str, builder: AgentBuilder) -> AgentBuilder {
        let Some(prices) = &self.loaded.prices else {
            return builder;
        };
        let table = Arc::clone(prices);
        let mut builder = builder.harness(move |harness| harness.prices(Arc::clone(&table)));
        if self.loaded.caps_cost() && prices.price(model).is_none() {
            let warning = format!(
                "{key}: model '{model}' has no price in [prices]: under a max_cost its calls are \
                 refused (add [prices.models.\"{model}\"])"
            );
            self.warnings.push(warning.clone());
            builder = builder.harness(move |harness| harness.warning(warning.clone()));
        }
        builder
    }

    fn built_agent(&mut self, id: &str) -> anyhow::Result<&Agent> {
        if !self.built.contains_key(id) {
            let agent = self.agent(id)?;
            self.built.insert(id.to_owned(), agent);
        }
        // Invariant: inserted just above when it was missing.
        self.built
            .get(id)
            .ok_or_else(|| anyhow::anyhow!("agent '{id}' was not built"))
    }

    fn model(&self, id: &str, section: &AgentSection) -> anyhow::Result<Arc<dyn ChatModel>> {
        let spec = section.model.get_ref().trim();
        if let Some(script) = &section.script {
            let name = spec.strip_prefix("scripted:").unwrap_or("scripted");
            return Ok(Arc::new(scripted_model(name, script.get_ref())));
        }
        let model = if spec == "env" {
            tinyagents::models::from_env().ok_or_else(|| {
                anyhow::anyhow!(
                    "agents.{id}.model is \"env\" and {} is not set",
                    tinyagents::models::MODEL_ENV_VAR
                )
            })?
        } else {
            tinyagents::models::from_spec(spec)
        };
        model.with_context(|| format!("making the model of agent '{id}' (agents.{id}.model)"))
    }
}

fn server_prefix(loaded: &Loaded, server: &str) -> Option<String> {
    let section = loaded.file.mcp.get(server)?;
    let prefix = section.prefix.clone().unwrap_or_else(|| server.to_owned());
    (!prefix.is_empty()).then_some(prefix)
}

/// Whether tool `name` is one of a server with `prefix` (any, unprefixed).
fn owned_by(name: &str, prefix: Option<&str>) -> bool {
    prefix.is_none_or(|p| {
        name.strip_prefix(p)
            .is_some_and(|rest| rest.starts_with('_'))
    })
}

fn policies(
    loaded: &Loaded,
    key: &str,
    section: &AgentSection,
    names: &[String],
    mut builder: AgentBuilder,
) -> anyhow::Result<AgentBuilder> {
    let policy = &section.policy;
    let named = |list: &[Spanned<String>], what: &str| -> anyhow::Result<()> {
        for name in list {
            if !names.contains(name.get_ref()) {
                return Err(check::unknown(
                    &loaded.source,
                    name,
                    &format!("{key}.policy.{what}"),
                    "tool of this agent",
                    names,
                )
                .into());
            }
        }
        Ok(())
    };
    if let Some(allow) = &policy.allow {
        named(allow, "allow")?;
        builder = builder.middleware(Arc::new(ToolAllowlistMiddleware::new(
            allow.iter().map(|n| n.get_ref().clone()),
        )));
    }
    named(&policy.deny, "deny")?;
    named(&policy.require_approval, "require_approval")?;
    named(&policy.auto_approve, "auto_approve")?;
    for name in &policy.deny {
        builder = builder.deny(name.get_ref());
    }
    for name in &policy.require_approval {
        builder = builder.require_approval(name.get_ref());
    }
    for name in &policy.auto_approve {
        builder = builder.auto_approve(name.get_ref());
    }
    let mask = policy
        .deny_side_effects
        .iter()
        .filter_map(|class| check::side_effect(class.get_ref()))
        .fold(SideEffects::NONE, |mask, class| mask | class);
    if !mask.is_empty() {
        builder = builder.middleware(Arc::new(
            ToolPolicyMiddleware::new().deny_side_effects(mask),
        ));
    }
    if policy.plan_mode {
        builder = builder.middleware(Arc::new(PlanModeMiddleware::new(true)));
    }
    Ok(builder)
}

fn limits(limits: &LimitsSection, builder: AgentBuilder) -> AgentBuilder {
    let LimitsSection {
        max_model_calls,
        max_tool_calls,
        max_tokens,
        ref max_cost,
        max_parallel_calls,
        wall_clock_secs,
        tool_timeout_secs,
        max_nested_depth,
        max_depth,
    } = *limits;
    let max_cost = max_cost.as_ref().map(|cost| cost.get_ref().0);
    builder.map_limits(move |mut l| {
        // A limit stops a run with what it has (exit code 4), as the
        // command line documents; failing would offer a recovery that the
        // limit would refuse again.
        l = l.with_behavior(LimitBehavior::Stop);
        if let Some(n) = max_model_calls {
            l = l.with_max_model_calls(n);
        }
        if let Some(n) = max_tool_calls {
            l = l.with_max_tool_calls(n);
        }
        if let Some(n) = max_tokens {
            l = l.with_max_tokens(n);
        }
        if let Some(cost) = max_cost {
            l = l.with_max_cost(cost);
        }
        if let Some(n) = max_parallel_calls {
            l = l.with_max_parallel_calls(n);
        }
        if let Some(secs) = wall_clock_secs {
            l = l.with_wall_clock(Some(Duration::from_secs(secs)));
        }
        if let Some(secs) = tool_timeout_secs {
            l = l.with_tool_timeout(Some(Duration::from_secs(secs)));
        }
        if let Some(n) = max_nested_depth {
            l = l.with_max_nested_depth(n);
        }
        if let Some(n) = max_depth {
            l = l.with_max_depth(n);
        }
        l
    })
}
