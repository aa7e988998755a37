//! `asynct.LLM`: a checkpoint loaded onto the GPU or the CPU behind one engine, for offline
//! generation from Python in the spirit of vLLM's `LLM` class.
//!
//! The executor comes from the loader `asynct generate` and `asynct serve` use (`backend`), so
//! the device choice, the GPU's memory sizing and the scheduler's step budget are the CLI's.
//! One generate runs at a time on an LLM; its prompts are one batch of the engine (continuous
//! batching: a request that finishes frees its slot for the next waiting one). [`Llm::abort`]
//! is the one method meant to be called while another thread's generate runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError};

use model::chat_template::ChatTemplate;
use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::Engine;
use model::scheduler::SchedulerConfig;
use model::start_times::StartTimes;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use tokenizers::Tokenizer;

use crate::args::{parse_precision, scalar};
use crate::batch::Batch;
use crate::chat::parse_conversations;
use crate::errors::{from_model, runtime_error, value_error};
use crate::outputs::RequestOutput;
use crate::prompts::{fit_prompts, parse_prompts, parse_sampling, Limits};
use crate::sampling::SeedSource;
use model::executor_loader::{
    check_step_budget, cpu_kv_cache_blocks, least_step_budget, load_executor, ExecutorOptions, PREFILL_CHUNK,
};

/// A model loaded for generation.
#[pyclass(module = "asynct", name = "LLM", frozen)]
pub struct Llm {
    engine: Mutex<Engine>,
    tokenizer: Arc<Tokenizer>,
    /// The checkpoint's chat template (ChatML where it has none), for `chat`.
    template: ChatTemplate,
    eos_token_ids: Vec<u32>,
    vocab_size: usize,
    /// Prompt plus output, at most.
    #[pyo3(get)]
    max_model_len: usize,
    /// Where and how the model runs, e.g. "cpu f32".
    #[pyo3(get)]
    device: String,
    model_dir: PathBuf,
    /// Where requests that give no seed get one (`seed=`).
    seeds: Mutex<SeedSource>,
    /// Set by `abort()`, read by the running generate after each step.
    cancel: AtomicBool,
    /// Whether a generate is running.
    busy: AtomicBool,
}

#[pymethods]
impl Llm {
    /// Loads `model` (a folder with config.json, model.safetensors, tokenizer.json). Bad options
    /// raise `ValueError` naming the option; a missing folder `FileNotFoundError`.
    #[new]
    #[pyo3(
        signature = (
            model, device=None, *, precision=None, max_num_seqs=None, max_model_len=None,
            gpu_memory_utilization=None, enforce_eager=None, cpu_kv_cache_gib=None, enable_prefix_caching=None,
            max_num_batched_tokens=None, decode_kernel=None, enable_pipelining=None, seed=None,
            tensor_parallel_size=None, trust_remote_code=None
        ),
        text_signature = "(model, device=\"auto\", *, precision=\"f32\", max_num_seqs=64, max_model_len=None, \
                          gpu_memory_utilization=0.9, enforce_eager=False, cpu_kv_cache_gib=None, \
                          enable_prefix_caching=True, max_num_batched_tokens=None, decode_kernel=\"auto\", \
                          enable_pipelining=True, seed=None, tensor_parallel_size=1, trust_remote_code=False)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        device: Option<&Bound<'_, PyAny>>,
        precision: Option<&Bound<'_, PyAny>>,
        max_num_seqs: Option<&Bound<'_, PyAny>>,
        max_model_len: Option<&Bound<'_, PyAny>>,
        gpu_memory_utilization: Option<&Bound<'_, PyAny>>,
        enforce_eager: Option<&Bound<'_, PyAny>>,
        cpu_kv_cache_gib: Option<&Bound<'_, PyAny>>,
        enable_prefix_caching: Option<&Bound<'_, PyAny>>,
        max_num_batched_tokens: Option<&Bound<'_, PyAny>>,
        decode_kernel: Option<&Bound<'_, PyAny>>,
        enable_pipelining: Option<&Bound<'_, PyAny>>,
        seed: Option<&Bound<'_, PyAny>>,
        tensor_parallel_size: Option<&Bound<'_, PyAny>>,
        trust_remote_code: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let model: PathBuf = scalar(Some(model), PathBuf::new(), "model", "a path")?;
        let device: String = scalar(device, "auto".into(), "device", "a string")?;
        let device = device.as_str();
        let precision: String = scalar(precision, "f32".into(), "precision", "a string")?;
        let max_num_seqs: i64 = scalar(max_num_seqs, 64, "max_num_seqs", "an integer")?;
        let max_model_len: Option<i64> = scalar(max_model_len, None, "max_model_len", "an integer or None")?;
        let gpu_memory_utilization: f64 = scalar(gpu_memory_utilization, 0.9, "gpu_memory_utilization", "a float")?;
        let enforce_eager: bool = scalar(enforce_eager, false, "enforce_eager", "a bool")?;
        let prefix_caching: bool = scalar(enable_prefix_caching, true, "enable_prefix_caching", "a bool")?;
        let pipelining: bool = scalar(enable_pipelining, true, "enable_pipelining", "a bool")?;
        let cpu_kv_cache_gib: Option<f64> = scalar(cpu_kv_cache_gib, None, "cpu_kv_cache_gib", "a float or None")?;
        let max_num_batched_tokens: Option<i64> =
            scalar(max_num_batched_tokens, None, "max_num_batched_tokens", "an integer or None")?;
        let decode_kernel: String = scalar(decode_kernel, "auto".into(), "decode_kernel", "a string")?;
        let decode_kernel = decode_kernel.as_str();
        let seed: Option<i128> = scalar(seed, None, "seed", "an integer or None")?;
        if let Some(s) = seed.filter(|&s| s < 0 || s > u64::MAX as i128) {
            return Err(value_error("seed", format!("must be in [0, 2^64), got {s}")));
        }
        let tensor_parallel_size: i64 = scalar(tensor_parallel_size, 1, "tensor_parallel_size", "an integer")?;
        if tensor_parallel_size != 1 {
            let message = format!("asynct runs a model on one device: must be 1, got {tensor_parallel_size}");
            return Err(value_error("tensor_parallel_size", message));
        }
        // vLLM's permission to run a checkpoint's own Python; asynct runs none (the weights are
        // safetensors and the config JSON), so either value loads the same model.
        let _: bool = scalar(trust_remote_code, false, "trust_remote_code", "a bool")?;
        // Checked here so that the errors name the Python options, not the CLI flags the shared
        // loader would name.
        if !["auto", "cpu", "cuda"].contains(&device) {
            return Err(value_error("device", format!("expected \"auto\", \"cpu\" or \"cuda\", got {device:?}")));
        }
        if !["auto", "graph", "mega"].contains(&decode_kernel) {
            return Err(value_error(
                "decode_kernel",
                format!("expected \"auto\", \"graph\" or \"mega\", got {decode_kernel:?}"),
            ));
        }
        let precision = parse_precision(&precision)?;
        if max_num_seqs < 1 {
            return Err(value_error("max_num_seqs", format!("must be >= 1, got {max_num_seqs}")));
        }
        if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
            return Err(value_error(
                "gpu_memory_utilization",
                format!("must be in (0, 1], got {gpu_memory_utilization}"),
            ));
        }
        let cfg = ModelConfig::load(&model).map_err(from_model)?;
        let limit = cfg.max_position_embeddings;
        let max_model_len = match max_model_len {
            None => limit,
            Some(n) if n >= 2 && n as usize <= limit => n as usize,
            Some(n) => {
                return Err(value_error("max_model_len", format!("must be in [2, {limit}] for this model, got {n}")))
            }
        };
        let max_num_seqs = max_num_seqs as usize;
        let option = "max_num_batched_tokens";
        let max_num_batched_tokens = max_num_batched_tokens
            .map(|n| match usize::try_from(n) {
                Ok(n) => check_step_budget(n, max_num_seqs, option).map_err(|e| PyValueError::new_err(e.to_string())),
                Err(_) => {
                    Err(value_error(option, format!("must be at least {}, got {n}", least_step_budget(max_num_seqs))))
                }
            })
            .transpose()?;
        let tok_path = model.join("tokenizer.json");
        if !tok_path.is_file() {
            return Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
                "{}: no such file",
                tok_path.display()
            )));
        }
        let template = ChatTemplate::from_model_dir(&model).map_err(|e| value_error("model", e))?;
        let tokenizer = Tokenizer::from_file(&tok_path)
            .map_err(|e| value_error("model", format!("{}: {e}", tok_path.display())))?;
        let opts = ExecutorOptions {
            device,
            precision,
            max_num_seqs,
            max_model_len,
            cpu_blocks: cpu_cache_blocks(&cfg, precision, max_num_seqs, max_model_len, cpu_kv_cache_gib)?,
            gpu_memory_utilization,
            enforce_eager,
            decode_kernel,
            max_num_batched_tokens,
        };
        let loaded = py
            .detach(|| load_executor(&model, &cfg, &opts, &mut |_, _| {}, &mut StartTimes::silent()))
            .map_err(|e| match e {
                model::Error::Memory { .. } => pyo3::exceptions::PyMemoryError::new_err(e.to_string()),
                other => runtime_error(other),
            })?;
        let sched = SchedulerConfig {
            max_num_seqs,
            max_batched_tokens: loaded.max_batched_tokens,
            prefill_chunk: PREFILL_CHUNK,
            max_model_len,
            prefix_caching,
        };
        let tokenizer = Arc::new(tokenizer);
        let mut engine = Engine::new(loaded.executor, tokenizer.clone(), sched, false).map_err(from_model)?;
        engine.set_pipelining(pipelining);
        Ok(Self {
            device: engine.describe(),
            engine: Mutex::new(engine),
            tokenizer,
            template,
            eos_token_ids: cfg.eos_token_id.clone(),
            vocab_size: cfg.vocab_size,
            max_model_len,
            model_dir: model,
            seeds: Mutex::new(SeedSource::new(seed.map(|s| s as u64))),
            cancel: AtomicBool::new(false),
            busy: AtomicBool::new(false),
        })
    }

    /// Generates a completion for each prompt; returns one `RequestOutput` per prompt, in order.
    /// The GIL is released while the engine runs. Ctrl-C raises `KeyboardInterrupt` within a
    /// step or two; `abort()` from another thread makes this return at once with the
    /// unfinished outputs cut short (finish_reason "abort"). `use_tqdm` (a bool) is taken for
    /// vLLM's callers' sake and shows nothing: no progress bar is drawn.
    #[pyo3(signature = (prompts, sampling_params=None, *, use_tqdm=None))]
    fn generate(
        &self,
        py: Python<'_>,
        prompts: &Bound<'_, PyAny>,
        sampling_params: Option<&Bound<'_, PyAny>>,
        use_tqdm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Py<RequestOutput>>> {
        let _: bool = scalar(use_tqdm, true, "use_tqdm", "a bool")?;
        let limits = Limits { tokenizer: &self.tokenizer, vocab_size: self.vocab_size };
        let prompts = parse_prompts(prompts, &limits)?;
        let params = parse_sampling(sampling_params, prompts.len())?;
        let prompts = fit_prompts(prompts, &params, self.max_model_len)?;
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        let mut engine = match self.engine.try_lock() {
            Ok(engine) => engine,
            Err(TryLockError::WouldBlock) => {
                return Err(runtime_error(
                    "another thread's generate is running on this LLM; one runs at a time (abort() stops it)",
                ))
            }
            Err(TryLockError::Poisoned(_)) => {
                return Err(runtime_error("this LLM's engine failed with a panic in an earlier call; load a new LLM"))
            }
        };
        // The flag is cleared before `busy` is raised, so an abort() that sees this generate
        // running cannot be lost.
        self.cancel.store(false, Ordering::Release);
        let _busy = Busy::raise(&self.busy);
        let mut seeds = self.seeds.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut batch =
            Batch::submit(&mut engine, prompts, &params, &mut seeds, &self.eos_token_ids, self.max_model_len)?;
        drop(seeds);
        // Finished or aborted alike, every request is accounted for in the batch.
        batch.run(py, &mut engine, &self.cancel)?;
        drop(engine);
        batch.into_done().into_iter().map(|d| d.into_py(py, &self.tokenizer)).collect()
    }

    /// Generates the assistant's reply to each conversation: `messages` is one conversation (a
    /// list of `{"role", "content"}` dicts) or a list of them, rendered with the checkpoint's chat
    /// template as `asynct serve`'s `/v1/chat/completions` renders them, then generated as
    /// `generate` does; one `RequestOutput` per conversation, its `prompt` the rendered text.
    #[pyo3(signature = (messages, sampling_params=None, *, use_tqdm=None))]
    fn chat(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        sampling_params: Option<&Bound<'_, PyAny>>,
        use_tqdm: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<Py<RequestOutput>>> {
        let prompts = parse_conversations(messages)?
            .iter()
            .enumerate()
            .map(|(i, c)| self.template.render(c).map_err(|e| value_error(&format!("messages[{i}]"), e)))
            .collect::<PyResult<Vec<String>>>()?;
        self.generate(py, PyList::new(py, prompts)?.as_any(), sampling_params, use_tqdm)
    }

    /// Stops the generate running in another thread: it returns what it has, unfinished
    /// outputs with finish_reason "abort". Returns whether a generate was running.
    fn abort(&self) -> bool {
        let running = self.busy.load(Ordering::Acquire);
        if running {
            self.cancel.store(true, Ordering::Release);
        }
        running
    }

    /// The checkpoint tokenizer's ids for `text` (no special tokens added, as generate does).
    fn encode(&self, text: &str) -> PyResult<Vec<u32>> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| value_error("text", e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `token_ids`, special tokens left out.
    fn decode(&self, token_ids: Vec<u32>) -> PyResult<String> {
        self.tokenizer.decode(&token_ids, true).map_err(|e| value_error("token_ids", e))
    }

    fn __repr__(&self) -> String {
        format!(
            "LLM({:?}, device={:?}, max_model_len={})",
            self.model_dir.display().to_string(),
            self.device,
            self.max_model_len
        )
    }
}

/// Marks a generate as running for as long as it lives.
struct Busy<'a>(&'a AtomicBool);

impl<'a> Busy<'a> {
    fn raise(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::Release);
        Self(flag)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The CPU KV cache in blocks, sized as `asynct serve` sizes it (`cpu_kv_cache_gib` for its
/// `--kv-cache-memory`); refusals name the option.
fn cpu_cache_blocks(
    cfg: &ModelConfig,
    precision: Precision,
    max_num_seqs: usize,
    max_model_len: usize,
    gib: Option<f64>,
) -> PyResult<usize> {
    cpu_kv_cache_blocks(cfg, precision, max_num_seqs, max_model_len, gib, "cpu_kv_cache_gib").map_err(|e| match e {
        model::Error::Options(msg) => pyo3::exceptions::PyValueError::new_err(msg),
        other => from_model(other),
    })
}
