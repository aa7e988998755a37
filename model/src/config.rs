//! `config.json`: the model's sizes and HP1 parameters (SPEC section 1), parsed, validated and
//! written back.
//!
//! Parsing is lenient where Hugging Face configs vary (`eos_token_id` an int or a list, `head_dim`
//! absent, `hp1.scale` null, extra fields ignored) and strict where a wrong value would give a
//! silently wrong model: [`ModelConfig::validate`] refuses every rule break with the field's name.

use std::path::Path;

use oracle::hp1::Hp1Params;
use oracle::model::weights::ModelDims;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The `architectures` entry an AsyncT checkpoint carries.
pub const ARCHITECTURE: &str = "AsyncTForCausalLM";
/// The `model_type` of an AsyncT checkpoint.
pub const MODEL_TYPE: &str = "asynct";
/// The file name of the config inside a checkpoint folder.
pub const CONFIG_FILE: &str = "config.json";

/// The `hp1` block of `config.json`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hp1Config {
    /// FIR taps `F` along the keys, at least 1.
    pub fir_k: usize,
    /// Whether scores are rectified before the FIR.
    pub relu_pre: bool,
    /// Lower clamp bound, at least 0 (so a non-positive `z` gives an exact zero).
    pub clip_min: f64,
    /// Upper clamp bound, above `clip_min`.
    pub clip_max: f64,
    /// Score scale; `None` (JSON null or absent) means `1/sqrt(head_dim)`.
    #[serde(default)]
    pub scale: Option<f64>,
}

/// A parsed `config.json`, with `head_dim` resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "RawConfig")]
pub struct ModelConfig {
    /// Must contain [`ARCHITECTURE`].
    pub architectures: Vec<String>,
    /// Must be [`MODEL_TYPE`].
    pub model_type: String,
    /// Vocabulary entries.
    pub vocab_size: usize,
    /// Residual width.
    pub hidden_size: usize,
    /// MLP inner width `I`.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads `Hq`.
    pub num_attention_heads: usize,
    /// Key/value heads `Hkv`, dividing `Hq`.
    pub num_key_value_heads: usize,
    /// Head dimension `D` (`hidden_size / num_attention_heads` when the file omits it).
    pub head_dim: usize,
    /// Longest sequence the model accepts.
    pub max_position_embeddings: usize,
    /// RoPE base.
    pub rope_theta: f64,
    /// Whether `lm_head` is `embed_tokens` (and absent from the checkpoint).
    pub tie_word_embeddings: bool,
    /// Must be `"silu"`.
    pub hidden_act: String,
    /// Must be false: AsyncT projections have no bias.
    pub attention_bias: bool,
    /// The type the weights are meant to run in (informational; the loader converts).
    pub torch_dtype: String,
    /// Every token id that ends a generation (JSON: an int or a list).
    #[serde(serialize_with = "serialize_eos")]
    pub eos_token_id: Vec<u32>,
    /// HP1 attention parameters, shared by all layers.
    pub hp1: Hp1Config,
}

/// `config.json` as written, before `head_dim` and `eos_token_id` are normalised.
#[derive(Deserialize)]
struct RawConfig {
    architectures: Vec<String>,
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    #[serde(default)]
    head_dim: Option<usize>,
    max_position_embeddings: usize,
    rope_theta: f64,
    tie_word_embeddings: bool,
    hidden_act: String,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default = "default_torch_dtype")]
    torch_dtype: String,
    eos_token_id: EosIds,
    hp1: Hp1Config,
}

/// `eos_token_id` may be one id or a list of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum EosIds {
    One(u32),
    Many(Vec<u32>),
}

fn default_torch_dtype() -> String {
    "bfloat16".into()
}

impl From<RawConfig> for ModelConfig {
    fn from(raw: RawConfig) -> Self {
        // A zero head count leaves head_dim at 0, which validate() then refuses by name.
        let head_dim =
            raw.head_dim.unwrap_or_else(|| raw.hidden_size.checked_div(raw.num_attention_heads).unwrap_or(0));
        ModelConfig {
            architectures: raw.architectures,
            model_type: raw.model_type,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: raw.num_attention_heads,
            num_key_value_heads: raw.num_key_value_heads,
            head_dim,
            max_position_embeddings: raw.max_position_embeddings,
            rope_theta: raw.rope_theta,
            tie_word_embeddings: raw.tie_word_embeddings,
            hidden_act: raw.hidden_act,
            attention_bias: raw.attention_bias,
            torch_dtype: raw.torch_dtype,
            eos_token_id: match raw.eos_token_id {
                EosIds::One(id) => vec![id],
                EosIds::Many(ids) => ids,
            },
            hp1: raw.hp1,
        }
    }
}

fn serialize_eos<S: serde::Serializer>(ids: &[u32], s: S) -> std::result::Result<S::Ok, S::Error> {
    match ids {
        [one] => s.serialize_u32(*one),
        many => many.serialize(s),
    }
}

fn refuse(field: &'static str, reason: String) -> Result<()> {
    Err(Error::Config { field, reason })
}

impl ModelConfig {
    /// Parses and validates `config.json` text; `file` only labels parse errors.
    pub fn from_json(text: &str, file: &Path) -> Result<Self> {
        let cfg: ModelConfig =
            serde_json::from_str(text).map_err(|e| Error::Json { file: file.to_path_buf(), reason: e.to_string() })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates `dir/config.json`.
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
        Self::from_json(&text, &path)
    }

    /// The config as pretty JSON, `head_dim` written out.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a ModelConfig has only JSON-representable fields")
    }

    /// The HP1 score scale: `hp1.scale`, or `1/sqrt(head_dim)` when null.
    pub fn hp1_scale(&self) -> f64 {
        self.hp1.scale.unwrap_or_else(|| 1.0 / (self.head_dim as f64).sqrt())
    }

    /// Refuses any value that breaks a rule of SPEC section 1, naming the field.
    pub fn validate(&self) -> Result<()> {
        if !self.architectures.iter().any(|a| a == ARCHITECTURE) {
            return refuse("architectures", format!("must contain \"{ARCHITECTURE}\", got {:?}", self.architectures));
        }
        if self.model_type != MODEL_TYPE {
            return refuse("model_type", format!("must be \"{MODEL_TYPE}\", got \"{}\"", self.model_type));
        }
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        for (field, value) in sizes {
            if value == 0 {
                return refuse(field, "must be at least 1, got 0".into());
            }
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return refuse(
                "num_key_value_heads",
                format!(
                    "must divide num_attention_heads = {}, got {}",
                    self.num_attention_heads, self.num_key_value_heads
                ),
            );
        }
        if !self.head_dim.is_multiple_of(2) {
            return refuse("head_dim", format!("must be even for rotate-half RoPE, got {}", self.head_dim));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0) {
            return refuse("rope_theta", format!("must be finite and positive, got {}", self.rope_theta));
        }
        if self.hidden_act != "silu" {
            return refuse("hidden_act", format!("must be \"silu\", got \"{}\"", self.hidden_act));
        }
        if self.attention_bias {
            return refuse("attention_bias", "must be false (AsyncT projections have no bias), got true".into());
        }
        if let Some(&id) = self.eos_token_id.iter().find(|&&id| id as usize >= self.vocab_size) {
            return refuse("eos_token_id", format!("must be below vocab_size = {}, got {id}", self.vocab_size));
        }
        self.validate_hp1()
    }

    fn validate_hp1(&self) -> Result<()> {
        let hp1 = &self.hp1;
        if hp1.fir_k < 1 {
            return refuse("hp1.fir_k", format!("must be at least 1, got {}", hp1.fir_k));
        }
        if !(hp1.clip_min.is_finite() && hp1.clip_min >= 0.0) {
            return refuse("hp1.clip_min", format!("must be finite and at least 0, got {}", hp1.clip_min));
        }
        if !(hp1.clip_max.is_finite() && hp1.clip_min < hp1.clip_max) {
            return refuse(
                "hp1.clip_max",
                format!("must be finite and above clip_min = {}, got {}", hp1.clip_min, hp1.clip_max),
            );
        }
        if let Some(scale) = hp1.scale {
            if !(scale.is_finite() && scale > 0.0) {
                return refuse("hp1.scale", format!("must be null or finite and positive, got {scale}"));
            }
        }
        Ok(())
    }

    /// The sizes and resolved HP1 parameters the oracle's forward pass takes.
    pub fn dims(&self) -> ModelDims {
        ModelDims {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            rope_theta: self.rope_theta,
            max_position_embeddings: self.max_position_embeddings,
            hp1: Hp1Params {
                scale: self.hp1_scale(),
                fir_k: self.hp1.fir_k,
                relu_pre: self.hp1.relu_pre,
                clip_min: self.hp1.clip_min,
                clip_max: self.hp1.clip_max,
            },
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// SPEC section 1's config.json, verbatim.
    pub(crate) const SPEC_CONFIG: &str = r#"{
      "architectures": ["AsyncTForCausalLM"], "model_type": "asynct",
      "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
      "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
      "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": true,
      "hidden_act": "silu", "attention_bias": false, "torch_dtype": "bfloat16",
      "eos_token_id": [151643, 151645],
      "hp1": {"fir_k": 3, "relu_pre": true, "clip_min": 0.0, "clip_max": 1.0, "scale": null}
    }"#;

    fn parse(text: &str) -> Result<ModelConfig> {
        ModelConfig::from_json(text, Path::new("config.json"))
    }

    #[test]
    fn spec_config_parses_with_null_scale_resolved() {
        let cfg = parse(SPEC_CONFIG).unwrap();
        assert_eq!(cfg.eos_token_id, vec![151643, 151645]);
        let dims = cfg.dims();
        assert_eq!((dims.num_heads, dims.num_kv_heads, dims.head_dim, dims.num_layers), (8, 4, 128, 35));
        assert_eq!(dims.hp1.scale, 1.0 / 128f64.sqrt());
    }

    #[test]
    fn single_eos_absent_head_dim_and_extra_fields() {
        let text = SPEC_CONFIG
            .replace("\"eos_token_id\": [151643, 151645]", "\"eos_token_id\": 7, \"rope_scaling\": {\"x\": 1}")
            .replace(", \"head_dim\": 128", "");
        let cfg = parse(&text).unwrap();
        assert_eq!(cfg.eos_token_id, vec![7]);
        assert_eq!(cfg.head_dim, 1024 / 8);
    }

    #[test]
    fn to_json_roundtrips() {
        let mut cfg = parse(SPEC_CONFIG).unwrap();
        cfg.hp1.scale = Some(0.25);
        assert_eq!(parse(&cfg.to_json()).unwrap(), cfg);
        cfg.eos_token_id = vec![3];
        let json = cfg.to_json();
        assert!(json.contains("\"eos_token_id\": 3"), "{json}");
        assert_eq!(parse(&json).unwrap(), cfg);
    }

    #[test]
    fn missing_field_is_a_json_error_naming_it() {
        let text = SPEC_CONFIG.replace("\"vocab_size\": 151936,", "");
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains("vocab_size") && msg.contains("config.json"), "{msg}");
    }
}
