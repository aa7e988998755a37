//! [`ChatTemplate`]: turns chat messages into the prompt text the model was trained on.
//!
//! Hugging Face models ship a Jinja template in `tokenizer_config.json`'s `chat_template`; it is
//! rendered here with minijinja, configured as `transformers` configures Jinja (blocks trimmed and
//! left-stripped, `raise_exception` defined). Templates written for Python Jinja also call Python's
//! `str` and `dict` methods (`content.startswith(...)`, `.split(...)`, `.strip(...)`), which
//! minijinja does not have; the common ones are supplied by `python_method` here. Models without a
//! template (the generated presets, whose tokenizer is bytes) get plain ChatML.
//!
//! A template that fails on a request's messages is the request's fault as far as the caller can
//! tell, so [`ChatTemplate::render`] returns a message naming minijinja's error, never panics; the
//! server answers it with a 400 on `messages`, the Python `LLM.chat` with a `ValueError`.

use std::path::Path;

use minijinja::value::ValueKind;
use minijinja::{context, Environment, Error, ErrorKind, State, Value};
use serde::Serialize;

const NAME: &str = "chat";

/// Roles a chat message may have; `developer` is OpenAI's newer name for `system`.
pub const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

/// One chat message, its content flattened to text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system` (a `developer` message's too), `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message of `role`, one of [`ROLES`] (`developer` becomes `system`, the name templates
    /// know); `None` for any other role.
    pub fn new(role: &str, content: String) -> Option<Self> {
        let role = match role {
            "developer" => "system",
            r if ROLES.contains(&r) => r,
            _ => return None,
        };
        Some(Self { role: role.to_string(), content })
    }
}

/// Used when `tokenizer_config.json` has no `chat_template`.
pub const CHATML: &str = "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A compiled chat template and the special tokens it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).field("eos_token", &self.eos_token).finish()
    }
}

impl ChatTemplate {
    /// The template of the model in `dir`: `tokenizer_config.json`'s `chat_template` when the file
    /// and the field exist, else ChatML. Fails on an unreadable or unparsable config, or a
    /// template that does not compile.
    pub fn from_model_dir(dir: &Path) -> Result<Self, String> {
        let path = dir.join("tokenizer_config.json");
        if !path.exists() {
            return Self::new(CHATML, "", "");
        }
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))?;
        let template = match &config["chat_template"] {
            serde_json::Value::String(s) => s.as_str(),
            serde_json::Value::Null => CHATML,
            // Some configs hold a list of named templates; the one named "default" is the chat one.
            serde_json::Value::Array(named) => {
                named.iter().find(|t| t["name"] == "default").and_then(|t| t["template"].as_str()).ok_or_else(|| {
                    format!("{}: `chat_template` is a list with no \"default\" template", path.display())
                })?
            }
            other => return Err(format!("{}: `chat_template` must be a string, got {other}", path.display())),
        };
        Self::new(template, &special_token(&config, "bos_token"), &special_token(&config, "eos_token"))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Compiles `source`, with `bos_token` and `eos_token` as the template's variables of those names.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, String> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_function("raise_exception", raise_exception);
        env.set_unknown_method_callback(python_method);
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| format!("chat template does not compile: {e:#}"))?;
        Ok(Self { env, bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
    }

    /// The prompt for `messages`, ending where the assistant's reply begins; the error names
    /// what the template failed on.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String, String> {
        let fail = |e: Error| format!("The chat template failed on these messages: {e}");
        let template = self.env.get_template(NAME).map_err(fail)?;
        let ctx = context! {
            messages => messages,
            add_generation_prompt => true,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        };
        template.render(ctx).map_err(fail)
    }
}

/// A special token's text: configs write it as a string or as an `AddedToken` object.
fn special_token(config: &serde_json::Value, key: &str) -> String {
    match &config[key] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(o) => o.get("content").and_then(|c| c.as_str()).unwrap_or_default().to_string(),
        _ => String::new(),
    }
}

/// Templates call this to reject a conversation they cannot format (e.g. roles out of order).
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// Python's `str` and `dict` methods that chat templates use, for values minijinja has no
/// method of that name for.
fn python_method(_: &State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        return str_method(s, method, args);
    }
    if value.kind() == ValueKind::Map {
        return map_method(value, method, args);
    }
    Err(unknown(value, method))
}

fn str_method(s: &str, method: &str, args: &[Value]) -> Result<Value, Error> {
    let arg = |i: usize| -> Result<Option<&str>, Error> {
        match args.get(i) {
            None => Ok(None),
            Some(v) if v.is_none() || v.is_undefined() => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, format!("str.{method}() takes strings, got {v}"))
            }),
        }
    };
    let required = |i: usize| -> Result<&str, Error> {
        arg(i)?.ok_or_else(|| Error::new(ErrorKind::MissingArgument, format!("str.{method}() needs an argument")))
    };
    Ok(match method {
        "startswith" => Value::from(s.starts_with(required(0)?)),
        "endswith" => Value::from(s.ends_with(required(0)?)),
        "strip" => Value::from(s.trim_matches(strip_set(arg(0)?))),
        "lstrip" => Value::from(s.trim_start_matches(strip_set(arg(0)?))),
        "rstrip" => Value::from(s.trim_end_matches(strip_set(arg(0)?))),
        "split" => match arg(0)? {
            Some("") => return Err(Error::new(ErrorKind::InvalidOperation, "str.split(): empty separator")),
            Some(sep) => Value::from(s.split(sep).map(Value::from).collect::<Vec<_>>()),
            None => Value::from(s.split_whitespace().map(Value::from).collect::<Vec<_>>()),
        },
        "upper" => Value::from(s.to_uppercase()),
        "lower" => Value::from(s.to_lowercase()),
        "replace" => Value::from(s.replace(required(0)?, required(1)?)),
        _ => return Err(unknown(&Value::from(s), method)),
    })
}

/// Python's `strip` family: the characters of `chars`, or whitespace when none are given.
fn strip_set(chars: Option<&str>) -> impl Fn(char) -> bool + '_ {
    move |c| chars.map_or(c.is_whitespace(), |set| set.contains(c))
}

fn map_method(map: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    let keys = || map.try_iter().map(|it| it.collect::<Vec<_>>());
    Ok(match method {
        "keys" => Value::from(keys()?),
        "values" => Value::from(keys()?.iter().map(|k| map.get_item(k)).collect::<Result<Vec<_>, _>>()?),
        "items" => {
            let pairs = keys()?.into_iter().map(|k| map.get_item(&k).map(|v| Value::from(vec![k, v])));
            Value::from(pairs.collect::<Result<Vec<_>, _>>()?)
        }
        "get" => {
            let key = args.first().ok_or_else(|| Error::new(ErrorKind::MissingArgument, "dict.get() needs a key"))?;
            match map.get_item(key)? {
                v if v.is_undefined() => args.get(1).cloned().unwrap_or(Value::from(())),
                v => v,
            }
        }
        _ => return Err(unknown(map, method)),
    })
}

fn unknown(value: &Value, method: &str) -> Error {
    Error::new(ErrorKind::UnknownMethod, format!("{} has no method named {method}", value.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage::new(role, content.to_string()).expect("a known role")
    }

    #[test]
    fn developer_is_system_and_other_roles_are_refused() {
        assert_eq!(msg("developer", "x"), ChatMessage { role: "system".into(), content: "x".into() });
        for role in ["system", "user", "assistant", "tool"] {
            assert_eq!(msg(role, "x").role, role);
        }
        assert_eq!(ChatMessage::new("robot", "x".into()), None);
    }

    fn qwen3() -> ChatTemplate {
        let dir = crate::presets::Qwen3TokenizerSearch::from_environment().find().expect("the Qwen3 tokenizer folder");
        ChatTemplate::from_model_dir(&dir).expect("Qwen3's template compiles")
    }

    #[test]
    fn default_is_chatml_with_the_generation_prompt() {
        let dir = std::env::temp_dir().join(format!("asynct-no-template-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t = ChatTemplate::from_model_dir(&dir).unwrap();
        let got = t.render(&[msg("system", "be brief"), msg("user", "hi")]).unwrap();
        let want = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn qwen3_renders_as_transformers_does() {
        let got = qwen3().render(&[msg("system", "be brief"), msg("user", "hi")]).unwrap();
        let want = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
    }

    #[test]
    fn qwen3_splits_thinking_from_earlier_assistant_turns() {
        // Exercises startswith, endswith, split, lstrip, rstrip and strip through the template.
        let messages = [
            msg("user", "2+2?"),
            msg("assistant", "<think>\nadd\n</think>\n\n4"),
            msg("user", "<tool_response>x</tool_response>"),
            msg("tool", "42"),
        ];
        let got = qwen3().render(&messages).unwrap();
        // The turn after the last real query keeps its thinking; tool turns merge into a user turn.
        let want = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nadd\n</think>\n\n4<|im_end|>\n\
                    <|im_start|>user\n<tool_response>x</tool_response><|im_end|>\n\
                    <|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
        // A turn before the last query loses its thinking.
        let got = qwen3().render(&[messages[0].clone(), messages[1].clone(), msg("user", "3+3?")]).unwrap();
        let want = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n\
                    <|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n";
        assert_eq!(got, want);
    }

    #[test]
    fn special_tokens_and_raise_exception_reach_the_template() {
        let source = "{{ bos_token }}|{{ eos_token }}|{% if messages[0].role != 'user' %}{{ raise_exception('first must be user, got ' + messages[0].role) }}{% endif %}ok";
        let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
        assert_eq!(t.render(&[msg("user", "x")]).unwrap(), "<s>|</s>|ok");
        let e = t.render(&[msg("system", "x")]).unwrap_err();
        assert!(e.contains("first must be user, got system"), "{e}");
    }

    #[test]
    fn python_methods_behave_as_python() {
        let source =
            "{{ m.content.strip() }}|{{ m.content.lstrip(' a') }}|{{ m.content.rstrip() }}|{{ m.content.split() }}|\
                      {{ m.content.split('b') }}|{{ m.content.upper() }}|{{ m.content.replace('a', 'o') }}|\
                      {{ m.get('role') }}|{{ m.get('name', 'anon') }}|{{ m.items() | length }}|{{ m.keys() | sort }}";
        let t = ChatTemplate::new(&format!("{{% set m = messages[0] %}}{source}"), "", "").unwrap();
        let got = t.render(&[msg("user", "  ab ab  ")]).unwrap();
        let want = r#"ab ab|b ab  |  ab ab|["ab", "ab"]|["  a", " a", "  "]|  AB AB  |  ob ob  |user|anon|2|["content", "role"]"#;
        assert_eq!(got, want);
    }

    #[test]
    fn template_errors_are_messages_not_panics() {
        let t = ChatTemplate::new("{{ messages[0].content.nosuchmethod() }}", "", "").unwrap();
        let e = t.render(&[msg("user", "x")]).unwrap_err();
        assert!(e.contains("nosuchmethod"), "{e}");
        let e = ChatTemplate::new("{{ messages[0].content.split('') }}", "", "").unwrap().render(&[msg("user", "x")]);
        assert!(e.unwrap_err().contains("empty separator"));
        assert!(ChatTemplate::new("{% if %}", "", "").unwrap_err().contains("does not compile"));
    }

    #[test]
    fn config_without_template_or_with_token_objects() {
        let dir = std::env::temp_dir().join(format!("asynct-token-objects-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = r#"{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"}"#;
        std::fs::write(dir.join("tokenizer_config.json"), config).unwrap();
        let t = ChatTemplate::from_model_dir(&dir).unwrap();
        assert_eq!((t.bos_token.as_str(), t.eos_token.as_str()), ("<s>", "</s>"));
        assert!(t.render(&[msg("user", "x")]).unwrap().ends_with("<|im_start|>assistant\n"));
        std::fs::write(dir.join("tokenizer_config.json"), "{not json").unwrap();
        assert!(ChatTemplate::from_model_dir(&dir).unwrap_err().contains("parsing"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
