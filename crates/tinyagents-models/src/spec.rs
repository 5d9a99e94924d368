//! Choosing a model by a string such as `openai:gpt-4o-mini`.
//!
//! | spec | provider | key (environment) | base URL (environment) |
//! |---|---|---|---|
//! | `openai:<model>` | OpenAI | `OPENAI_API_KEY` (required) | `OPENAI_BASE_URL` |
//! | `anthropic:<model>` | Anthropic | `ANTHROPIC_API_KEY` (required) | `ANTHROPIC_BASE_URL` |
//! | `ollama:<model>` | Ollama | none | `OLLAMA_HOST` (`host:port` or a URL) |
//! | `openai-compatible:<base url>#<model>` | any compatible server | `OPENAI_COMPATIBLE_API_KEY` (optional) | in the spec |
//!
//! The OpenAI key is never sent to an `openai-compatible` server: that URL
//! may be anyone's.
//!
//! Every spec parses whatever features are on; building one whose client is
//! not compiled in (the `anthropic` spec needs the `anthropic` feature, the
//! others the `openai` feature) is [`SpecError::ProviderNotCompiled`].

use std::sync::Arc;

use tinyagents_core::{ChatModel, ModelError};

#[cfg(feature = "anthropic")]
use crate::anthropic::{AnthropicConfig, AnthropicModel};
#[cfg(feature = "openai")]
use crate::openai::{OpenAiConfig, OpenAiModel, ToolOnlyContent};
use crate::secret::redact_url;

/// The variable [`from_env`] reads.
pub const MODEL_ENV_VAR: &str = "TINYAGENTS_MODEL";

/// Why a model spec could not become a model.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec has no `provider:` prefix.
    #[error("model spec {spec:?} has no provider: write provider:model, e.g. openai:gpt-4o-mini")]
    MissingProvider {
        /// The spec as given.
        spec: String,
    },
    /// The provider is not one this crate knows.
    #[error(
        "unknown model provider {provider:?} (known: openai, anthropic, ollama, openai-compatible, llama-cpp)"
    )]
    UnknownProvider {
        /// The provider as written.
        provider: String,
    },
    /// The spec names no model.
    #[error("model spec {spec:?} names no model")]
    MissingModel {
        /// The spec as given.
        spec: String,
    },
    /// A base URL that is not `http://…` or `https://…`.
    #[error("invalid base URL {url:?}: it must start with http:// or https://")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
    },
    /// The provider needs a key and its variable is unset or empty.
    #[error("{provider} needs an API key: set {variable}")]
    MissingKey {
        /// The provider.
        provider: &'static str,
        /// The environment variable to set.
        variable: &'static str,
    },
    /// The spec's provider is known but its client was not compiled in.
    #[error(
        "provider '{provider}' is not compiled in: enable the `{feature}` feature of tinyagents (or tinyagents-models)"
    )]
    ProviderNotCompiled {
        /// The provider, as a spec names it (`anthropic`, `ollama`, …).
        provider: &'static str,
        /// The cargo feature that compiles its client (`openai` or `anthropic`).
        feature: &'static str,
    },
    /// The client could not be built.
    #[error("cannot build the model client: {source}")]
    Client {
        /// Why.
        #[source]
        source: ModelError,
    },
}

/// A parsed model spec.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelSpec {
    /// `openai:<model>`.
    OpenAi {
        /// The model name.
        model: String,
    },
    /// `anthropic:<model>`.
    Anthropic {
        /// The model name.
        model: String,
    },
    /// `ollama:<model>` (the model name may hold colons: `ollama:qwen3:8b`).
    Ollama {
        /// The model name.
        model: String,
    },
    /// `openai-compatible:<base url>#<model>`.
    OpenAiCompatible {
        /// The API root, e.g. `http://localhost:8000/v1`.
        base_url: String,
        /// The model name.
        model: String,
    },
    /// `llama-cpp:<base url>#<model>`: an OpenAI-compatible llama.cpp
    /// server (llama-cpp-python's, `llama-server`), which needs an empty
    /// string, not `null`, as the text of a turn that only calls tools
    /// ([`ToolOnlyContent::EmptyString`](crate::openai::ToolOnlyContent)),
    /// and gets requests that offer tools whole, not streamed
    /// ([`OpenAiConfig::stream_with_tools`](crate::OpenAiConfig)).
    LlamaCpp {
        /// The API root, e.g. `http://localhost:8000/v1`.
        base_url: String,
        /// The model name.
        model: String,
    },
}

impl std::fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::OpenAi { model } => f.debug_struct("OpenAi").field("model", model).finish(),
            Self::Anthropic { model } => f.debug_struct("Anthropic").field("model", model).finish(),
            Self::Ollama { model } => f.debug_struct("Ollama").field("model", model).finish(),
            Self::OpenAiCompatible { base_url, model } => f
                .debug_struct("OpenAiCompatible")
                .field("base_url", &redact_url(base_url))
                .field("model", model)
                .finish(),
            Self::LlamaCpp { base_url, model } => f
                .debug_struct("LlamaCpp")
                .field("base_url", &redact_url(base_url))
                .field("model", model)
                .finish(),
        }
    }
}

impl ModelSpec {
    /// Parses `provider:model` (surrounding whitespace is ignored).
    pub fn parse(spec: &str) -> Result<Self, SpecError> {
        let spec = spec.trim();
        let (provider, rest) = spec
            .split_once(':')
            .ok_or_else(|| SpecError::MissingProvider {
                spec: redact_url(spec),
            })?;
        let model = |m: &str| {
            let m = m.trim();
            if m.is_empty() {
                Err(SpecError::MissingModel {
                    spec: redact_url(spec),
                })
            } else {
                Ok(m.to_owned())
            }
        };
        match provider.trim().to_ascii_lowercase().as_str() {
            "openai" => Ok(Self::OpenAi {
                model: model(rest)?,
            }),
            "anthropic" => Ok(Self::Anthropic {
                model: model(rest)?,
            }),
            "ollama" => Ok(Self::Ollama {
                model: model(rest)?,
            }),
            compatible @ ("openai-compatible" | "llama-cpp") => {
                let (base_url, name) =
                    rest.rsplit_once('#')
                        .ok_or_else(|| SpecError::MissingModel {
                            spec: redact_url(spec),
                        })?;
                let base_url = http_url(base_url.trim())?;
                let model = model(name)?;
                Ok(if compatible == "llama-cpp" {
                    Self::LlamaCpp { base_url, model }
                } else {
                    Self::OpenAiCompatible { base_url, model }
                })
            }
            other => Err(SpecError::UnknownProvider {
                provider: other.to_owned(),
            }),
        }
    }

    /// The provider, as the spec names it: `openai`, `anthropic`,
    /// `ollama`, `openai-compatible` or `llama-cpp`.
    pub fn provider(&self) -> &'static str {
        match self {
            Self::OpenAi { .. } => "openai",
            Self::Anthropic { .. } => "anthropic",
            Self::Ollama { .. } => "ollama",
            Self::OpenAiCompatible { .. } => "openai-compatible",
            Self::LlamaCpp { .. } => "llama-cpp",
        }
    }

    /// The cargo feature (of `tinyagents` and of this crate) that compiles
    /// the spec's client: `anthropic` for Anthropic, `openai` for the rest
    /// (they all speak OpenAI's Chat Completions).
    pub fn required_feature(&self) -> &'static str {
        match self {
            Self::Anthropic { .. } => "anthropic",
            _ => "openai",
        }
    }

    /// The error for a spec whose client is not compiled in.
    #[cfg(any(test, not(all(feature = "openai", feature = "anthropic"))))]
    fn not_compiled(&self) -> SpecError {
        SpecError::ProviderNotCompiled {
            provider: self.provider(),
            feature: self.required_feature(),
        }
    }

    /// Builds the model, reading keys and base URLs through `env` (a
    /// function of the variable name, so tests need not touch the process
    /// environment). A spec whose client is not compiled in is
    /// [`SpecError::ProviderNotCompiled`].
    pub fn build_with_env(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn ChatModel>, SpecError> {
        let var = |name: &str| {
            env(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        #[cfg(any(feature = "openai", feature = "anthropic"))]
        let client = |source| SpecError::Client { source };
        match self {
            #[cfg(feature = "openai")]
            Self::OpenAi { model } => {
                let key = var("OPENAI_API_KEY").ok_or(SpecError::MissingKey {
                    provider: "openai",
                    variable: "OPENAI_API_KEY",
                })?;
                let mut config = OpenAiConfig::openai(model).with_api_key(key);
                if let Some(url) = var("OPENAI_BASE_URL") {
                    config.base_url = http_url(&url)?;
                }
                Ok(Arc::new(OpenAiModel::new(config).map_err(client)?))
            }
            #[cfg(feature = "anthropic")]
            Self::Anthropic { model } => {
                let key = var("ANTHROPIC_API_KEY").ok_or(SpecError::MissingKey {
                    provider: "anthropic",
                    variable: "ANTHROPIC_API_KEY",
                })?;
                let mut config = AnthropicConfig::new(model).with_api_key(key);
                if let Some(url) = var("ANTHROPIC_BASE_URL") {
                    config.base_url = format!(
                        "{}/v1",
                        http_url(&url)?
                            .trim_end_matches('/')
                            .trim_end_matches("/v1")
                    );
                }
                Ok(Arc::new(AnthropicModel::new(config).map_err(client)?))
            }
            #[cfg(feature = "openai")]
            Self::Ollama { model } => {
                let mut config = OpenAiConfig::ollama(model);
                if let Some(host) = var("OLLAMA_HOST") {
                    let url = if host.contains("://") {
                        host
                    } else {
                        format!("http://{host}")
                    };
                    config.base_url = format!("{}/v1", http_url(&url)?.trim_end_matches('/'));
                }
                Ok(Arc::new(OpenAiModel::new(config).map_err(client)?))
            }
            #[cfg(feature = "openai")]
            Self::OpenAiCompatible { base_url, model } | Self::LlamaCpp { base_url, model } => {
                let mut config = OpenAiConfig::compatible(base_url, model);
                if matches!(self, Self::LlamaCpp { .. }) {
                    config = config
                        .with_tool_only_content(ToolOnlyContent::EmptyString)
                        .with_stream_with_tools(false);
                }
                config.api_key = var("OPENAI_COMPATIBLE_API_KEY");
                Ok(Arc::new(OpenAiModel::new(config).map_err(client)?))
            }
            #[cfg(not(all(feature = "openai", feature = "anthropic")))]
            _ => {
                // Without any provider, `var` has no other use.
                let _ = var;
                Err(self.not_compiled())
            }
        }
    }
}

impl std::str::FromStr for ModelSpec {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        Self::parse(spec)
    }
}

fn http_url(url: &str) -> Result<String, SpecError> {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !url.chars().any(char::is_whitespace) => {
            Ok(url.to_owned())
        }
        _ => Err(SpecError::InvalidBaseUrl {
            url: redact_url(url),
        }),
    }
}

/// Builds a model from a spec such as `openai:gpt-4o-mini`, with keys from
/// the process environment: `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`,
/// `OLLAMA_HOST`, `OPENAI_COMPATIBLE_API_KEY` (see `docs/models.md`).
/// Nothing is sent until the model is asked something.
///
/// ```
/// # #[cfg(feature = "openai")] {
/// let model = tinyagents_models::from_spec("openai-compatible:http://localhost:8000/v1#qwen3")?;
/// assert_eq!(model.name(), "qwen3");
/// # }
/// assert!(tinyagents_models::from_spec("gpt-4o").is_err()); // no provider
/// # Ok::<(), tinyagents_models::SpecError>(())
/// ```
pub fn from_spec(spec: &str) -> Result<Arc<dyn ChatModel>, SpecError> {
    ModelSpec::parse(spec)?.build_with_env(|name| std::env::var(name).ok())
}

/// The model named by `TINYAGENTS_MODEL`: `None` when it is unset or empty,
/// so a caller can fall back to another model (the quickstart falls back to
/// a scripted one).
pub fn from_env() -> Option<Result<Arc<dyn ChatModel>, SpecError>> {
    let spec = std::env::var(MODEL_ENV_VAR).ok()?;
    if spec.trim().is_empty() {
        return None;
    }
    Some(from_spec(&spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn parses_every_provider() {
        assert_eq!(
            ModelSpec::parse(" openai:gpt-4o-mini ").unwrap(),
            ModelSpec::OpenAi {
                model: "gpt-4o-mini".into()
            }
        );
        assert_eq!(
            ModelSpec::parse("anthropic:claude-sonnet-4-5").unwrap(),
            ModelSpec::Anthropic {
                model: "claude-sonnet-4-5".into()
            }
        );
        assert_eq!(
            ModelSpec::parse("ollama:qwen3:8b").unwrap(),
            ModelSpec::Ollama {
                model: "qwen3:8b".into()
            }
        );
        assert_eq!(
            "openai-compatible:http://127.0.0.1:8000/v1#meta/llama"
                .parse::<ModelSpec>()
                .unwrap(),
            ModelSpec::OpenAiCompatible {
                base_url: "http://127.0.0.1:8000/v1".into(),
                model: "meta/llama".into()
            }
        );
    }

    #[test]
    fn refuses_bad_specs_with_the_reason() {
        assert!(matches!(
            ModelSpec::parse("gpt-4o"),
            Err(SpecError::MissingProvider { .. })
        ));
        assert!(matches!(
            ModelSpec::parse("openai:"),
            Err(SpecError::MissingModel { .. })
        ));
        assert!(
            matches!(ModelSpec::parse("gemini:x"), Err(SpecError::UnknownProvider { provider }) if provider == "gemini")
        );
        assert!(matches!(
            ModelSpec::parse("openai-compatible:http://x/v1"),
            Err(SpecError::MissingModel { .. })
        ));
        assert!(matches!(
            ModelSpec::parse("openai-compatible:ftp://x#m"),
            Err(SpecError::InvalidBaseUrl { .. })
        ));
        assert!(matches!(
            ModelSpec::parse("openai-compatible:http://#m"),
            Err(SpecError::InvalidBaseUrl { .. })
        ));
    }

    #[cfg(all(feature = "openai", feature = "anthropic"))]
    #[test]
    fn keys_come_from_the_environment() {
        let missing = ModelSpec::parse("openai:gpt-4o-mini")
            .unwrap()
            .build_with_env(env(&[("OPENAI_API_KEY", " ")]));
        assert_eq!(
            missing.err(),
            Some(SpecError::MissingKey {
                provider: "openai",
                variable: "OPENAI_API_KEY"
            })
        );
        let anthropic = ModelSpec::parse("anthropic:claude")
            .unwrap()
            .build_with_env(env(&[]));
        assert!(matches!(
            anthropic,
            Err(SpecError::MissingKey {
                variable: "ANTHROPIC_API_KEY",
                ..
            })
        ));
        let model = ModelSpec::parse("openai:gpt-4o-mini")
            .unwrap()
            .build_with_env(env(&[("OPENAI_API_KEY", "sk-test")]))
            .unwrap();
        assert_eq!(model.name(), "gpt-4o-mini");
        let ollama = ModelSpec::parse("ollama:llama3.2")
            .unwrap()
            .build_with_env(env(&[("OLLAMA_HOST", "0.0.0.0:1234")]));
        assert_eq!(ollama.unwrap().name(), "llama3.2");
        let compatible = ModelSpec::parse("openai-compatible:http://localhost:8000/v1#m")
            .unwrap()
            .build_with_env(env(&[]));
        assert!(compatible.is_ok());
        let bad_url = ModelSpec::parse("openai:m")
            .unwrap()
            .build_with_env(env(&[("OPENAI_API_KEY", "k"), ("OPENAI_BASE_URL", "nope")]));
        assert!(matches!(bad_url, Err(SpecError::InvalidBaseUrl { .. })));
    }

    #[test]
    fn a_provider_not_compiled_in_names_itself_and_its_feature() {
        let error = ModelSpec::parse("anthropic:claude").unwrap().not_compiled();
        assert_eq!(
            error,
            SpecError::ProviderNotCompiled {
                provider: "anthropic",
                feature: "anthropic"
            }
        );
        assert_eq!(
            error.to_string(),
            "provider 'anthropic' is not compiled in: enable the `anthropic` feature of \
             tinyagents (or tinyagents-models)"
        );
        // Every OpenAI-compatible spec needs the `openai` feature.
        for spec in [
            "openai:m",
            "ollama:m",
            "openai-compatible:http://x/v1#m",
            "llama-cpp:http://x/v1#m",
        ] {
            let spec = ModelSpec::parse(spec).unwrap();
            assert_eq!(spec.required_feature(), "openai", "{spec:?}");
            assert!(
                spec.not_compiled()
                    .to_string()
                    .starts_with(&format!("provider '{}' is not", spec.provider())),
                "{spec:?}"
            );
        }
    }

    #[cfg(not(feature = "anthropic"))]
    #[test]
    fn anthropic_without_its_feature_is_refused_by_name() {
        let built = ModelSpec::parse("anthropic:claude")
            .unwrap()
            .build_with_env(env(&[("ANTHROPIC_API_KEY", "k")]));
        assert_eq!(
            built.err(),
            Some(SpecError::ProviderNotCompiled {
                provider: "anthropic",
                feature: "anthropic"
            })
        );
    }

    #[cfg(not(feature = "openai"))]
    #[test]
    fn openai_compatible_specs_without_the_feature_are_refused_by_name() {
        let built = ModelSpec::parse("ollama:llama3.2")
            .unwrap()
            .build_with_env(env(&[]));
        assert_eq!(
            built.err(),
            Some(SpecError::ProviderNotCompiled {
                provider: "ollama",
                feature: "openai"
            })
        );
    }
}
