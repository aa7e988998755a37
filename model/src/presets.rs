//! The model presets the project ships a generator for (SPEC section 1), and the generator:
//! `config.json`, seeded random bf16 weights and the tokenizer, written into one folder.
//!
//! | preset | vocab | hidden | I | layers | Hq/Hkv | D | positions | rope_theta | eos |
//! |---|---|---|---|---|---|---|---|---|---|
//! | `asynct-tiny` | 512 | 64 | 192 | 2 | 4/2 | 16 | 2048 | 1e4 | 510 (`<\|endoftext\|>`) |
//! | `asynct-mini` | 4096 | 256 | 640 | 4 | 4/2 | 64 | 1024 | 1e4 | 510 (`<\|endoftext\|>`) |
//! | `asynct-small` | 151936 | 512 | 1536 | 4 | 4/2 | 128 | 32768 | 1e6 | 151643, 151645 |
//! | `asynct-0.5b` | 151936 | 1024 | 3072 | 35 | 8/4 | 128 | 32768 | 1e6 | 151643, 151645 |
//!
//! All of them tie `lm_head` to the embeddings and use the HP1 block of SPEC section 1
//! (`fir_k` 3, `relu_pre`, clip to `[0, 1]`, scale `1/sqrt(D)`). The tiny model's context and
//! RoPE base are small because it only runs short CPU tests. `asynct-mini` is the shape that
//! `python -m asynct.train` trains: the smallest with a head dim the GPU kernels take (64), 3.8M
//! parameters (7.6 MB in bf16, embeddings included) so a trained one fits in the repository, and a
//! 4096-entry vocabulary for a byte-level BPE trained on the corpus. Generated, it carries
//! [`crate::byte_tokenizer`] (ids below 512; the other rows are padding) as `asynct-tiny` does;
//! trained, its tokenizer and eos id are the ones training wrote. The other two copy the Qwen3
//! tokenizer, found by [`Qwen3TokenizerSearch`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use oracle::model::init::random_weights;

use crate::byte_tokenizer;
use crate::checkpoint::{save_checkpoint, StoredDtype};
use crate::config::{Hp1Config, ModelConfig, ARCHITECTURE, MODEL_TYPE};
use crate::error::{Error, Result};

/// The environment variable naming the folder that holds the Qwen3 `tokenizer.json`.
pub const QWEN3_TOKENIZER_ENV: &str = "ASYNCT_QWEN3_TOKENIZER_DIR";
/// Where the Qwen3 tokenizer sits below a `shared/` checkout's parent.
const QWEN3_SUBDIR: &str = "shared/tokenizers/qwen3";
/// Qwen3's `<|endoftext|>` and `<|im_end|>`.
const QWEN3_EOS: [u32; 2] = [151643, 151645];
/// Qwen3's vocabulary rows (the tokenizer uses fewer ids; the rest are padding).
const QWEN3_VOCAB: usize = 151936;

/// A shipped model shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    /// `asynct-tiny`: CPU tests.
    Tiny,
    /// `asynct-mini`: the smallest GPU-capable shape, the one the project trains.
    Mini,
    /// `asynct-small`: GPU end-to-end tests.
    Small,
    /// `asynct-0.5b`: the seed's shape, for benchmarks.
    HalfBillion,
}

impl Preset {
    /// Every preset, smallest first.
    pub const ALL: [Preset; 4] = [Preset::Tiny, Preset::Mini, Preset::Small, Preset::HalfBillion];

    /// The preset's name, as the CLI and folder names spell it.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "asynct-tiny",
            Preset::Mini => "asynct-mini",
            Preset::Small => "asynct-small",
            Preset::HalfBillion => "asynct-0.5b",
        }
    }

    /// The preset's `config.json`.
    pub fn config(self) -> ModelConfig {
        // (vocab, hidden, I, layers, Hq, Hkv, D, positions, rope_theta, eos)
        let (vocab, hidden, inner, layers, heads, kv_heads, head_dim, positions, rope_theta, eos) = match self {
            Preset::Tiny => (byte_tokenizer::VOCAB_SIZE, 64, 192, 2, 4, 2, 16, 2048, 1e4, vec![byte_tokenizer::EOS_ID]),
            Preset::Mini => (4096, 256, 640, 4, 4, 2, 64, 1024, 1e4, vec![byte_tokenizer::EOS_ID]),
            Preset::Small => (QWEN3_VOCAB, 512, 1536, 4, 4, 2, 128, 32768, 1e6, QWEN3_EOS.to_vec()),
            Preset::HalfBillion => (QWEN3_VOCAB, 1024, 3072, 35, 8, 4, 128, 32768, 1e6, QWEN3_EOS.to_vec()),
        };
        ModelConfig {
            architectures: vec![ARCHITECTURE.into()],
            model_type: MODEL_TYPE.into(),
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: inner,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            max_position_embeddings: positions,
            rope_theta,
            tie_word_embeddings: true,
            hidden_act: "silu".into(),
            attention_bias: false,
            torch_dtype: StoredDtype::Bf16.torch_name().into(),
            eos_token_id: eos,
            hp1: Hp1Config { fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0, scale: None },
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| Error::UnknownPreset { got: s.into(), expected: Preset::ALL.map(Preset::name).join(", ") })
    }
}

/// Where to look for the Qwen3 tokenizer, in order: the folder named by
/// [`QWEN3_TOKENIZER_ENV`], then `shared/tokenizers/qwen3` under the start folder and each of its
/// ancestors (which covers a checkout with `shared/` beside it, as `/work/main` and
/// `/work/shared`), then the `shared/` beside this crate's workspace at build time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Qwen3TokenizerSearch {
    /// The environment variable's folder, if set.
    pub env_dir: Option<PathBuf>,
    /// The folder whose ancestors are walked (the current directory).
    pub start_dir: Option<PathBuf>,
    /// The `shared/` folder known when the crate was built.
    pub build_time_shared: Option<PathBuf>,
}

impl Qwen3TokenizerSearch {
    /// The search this process would run: its environment, its current directory, its build.
    pub fn from_environment() -> Self {
        Qwen3TokenizerSearch {
            env_dir: std::env::var_os(QWEN3_TOKENIZER_ENV).map(PathBuf::from),
            start_dir: std::env::current_dir().ok(),
            build_time_shared: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")),
        }
    }

    /// Every folder tried, in order, without repeats.
    pub fn candidates(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        out.extend(self.env_dir.clone());
        if let Some(start) = &self.start_dir {
            out.extend(start.ancestors().map(|a| a.join(QWEN3_SUBDIR)));
        }
        out.extend(self.build_time_shared.as_ref().map(|s| s.join("tokenizers/qwen3")));
        let mut seen = std::collections::HashSet::new();
        out.retain(|p| seen.insert(p.clone()));
        out
    }

    /// The first candidate folder holding `tokenizer.json`.
    pub fn find(&self) -> Result<PathBuf> {
        let searched = self.candidates();
        match searched.iter().find(|dir| dir.join("tokenizer.json").is_file()) {
            Some(dir) => Ok(dir.clone()),
            None => Err(Error::TokenizerNotFound { searched }),
        }
    }
}

/// Writes `preset`'s checkpoint (config, bf16 weights from `seed`, tokenizer) into `out_dir`,
/// finding the Qwen3 tokenizer through [`Qwen3TokenizerSearch::from_environment`].
pub fn generate(preset: Preset, out_dir: &Path, seed: u64) -> Result<()> {
    generate_with(preset, out_dir, seed, &Qwen3TokenizerSearch::from_environment())
}

/// [`generate`] with an explicit tokenizer search (tiny and mini ignore it).
pub fn generate_with(preset: Preset, out_dir: &Path, seed: u64, search: &Qwen3TokenizerSearch) -> Result<()> {
    let cfg = preset.config();
    // Find the tokenizer before spending time on weights, so a missing one fails at once.
    let qwen3_dir = match preset {
        Preset::Tiny | Preset::Mini => None,
        Preset::Small | Preset::HalfBillion => Some(search.find()?),
    };
    std::fs::create_dir_all(out_dir).map_err(Error::io(out_dir))?;
    match qwen3_dir {
        None => {
            write(&out_dir.join("tokenizer.json"), &byte_tokenizer::tokenizer_json()?)?;
            let tokenizer_cfg = byte_tokenizer::tokenizer_config_json(cfg.max_position_embeddings);
            write(&out_dir.join("tokenizer_config.json"), &tokenizer_cfg)?;
        }
        Some(dir) => {
            for name in ["tokenizer.json", "tokenizer_config.json"] {
                let from = dir.join(name);
                // Read and write rather than copy, so the read-only mode of shared/ is not copied.
                if from.is_file() {
                    let bytes = std::fs::read(&from).map_err(Error::io(&from))?;
                    let to = out_dir.join(name);
                    std::fs::write(&to, bytes).map_err(Error::io(&to))?;
                }
            }
        }
    }
    let weights = random_weights(&cfg.dims(), seed);
    save_checkpoint(out_dir, &cfg, &weights, StoredDtype::Bf16)
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(Error::io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_validates_and_matches_the_spec_table() {
        let shape = |p: Preset| {
            let c = p.config();
            c.validate().unwrap();
            let d = c.dims();
            (d.vocab_size, d.hidden_size, d.intermediate_size, d.num_layers, d.num_heads, d.num_kv_heads, d.head_dim)
        };
        assert_eq!(shape(Preset::Tiny), (512, 64, 192, 2, 4, 2, 16));
        assert_eq!(shape(Preset::Mini), (4096, 256, 640, 4, 4, 2, 64));
        assert_eq!(shape(Preset::Small), (151936, 512, 1536, 4, 4, 2, 128));
        assert_eq!(shape(Preset::HalfBillion), (151936, 1024, 3072, 35, 8, 4, 128));
    }

    #[test]
    fn half_billion_is_the_spec_config_json() {
        let spec = ModelConfig::from_json(crate::config::tests::SPEC_CONFIG, Path::new("spec")).unwrap();
        assert_eq!(spec, Preset::HalfBillion.config());
    }

    #[test]
    fn names_parse_back_and_unknown_names_list_the_known() {
        for p in Preset::ALL {
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
        let msg = "asynct-huge".parse::<Preset>().unwrap_err().to_string();
        assert!(
            msg.contains("asynct-huge") && msg.contains("asynct-tiny, asynct-mini, asynct-small, asynct-0.5b"),
            "{msg}"
        );
    }

    #[test]
    fn candidates_walk_ancestors_after_the_env_dir() {
        let search = Qwen3TokenizerSearch {
            env_dir: Some("/env".into()),
            start_dir: Some("/a/b".into()),
            build_time_shared: Some("/a/shared".into()),
        };
        let want: Vec<PathBuf> =
            ["/env", "/a/b/shared/tokenizers/qwen3", "/a/shared/tokenizers/qwen3", "/shared/tokenizers/qwen3"]
                .map(PathBuf::from)
                .to_vec();
        assert_eq!(search.candidates(), want);
    }
}
