//! `asynct serve`: load the model, start the engine thread, serve HTTP until SIGINT or SIGTERM,
//! then drain and exit.
//!
//! The order of shutdown matters: the signal first tells the engine thread to stop admitting and
//! to finish (or, after the grace period, abort) what runs, while axum stops accepting and waits
//! for open responses; those end because every stream gets a finish reason. Only then does the
//! engine thread get joined, so the process exits 0 with no stream cut short.
//!
//! The start logs the wall time of each of its phases as it ends (`start: PHASE S s`, from
//! [`StartTimes`]), then one summary line once listening, which also gives the Unix time `main`
//! began, so that a launcher's own clock tells how long the process took to reach it. The
//! tokenizer and chat template load on a thread of their own while the executor loads.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use model::config::ModelConfig;
use model::cpu_backend::Precision;
use model::engine::Engine;
use model::start_times::{StartPhase, StartTimes};
use tokenizers::Tokenizer;
use tokio::sync::watch;

use crate::api::types::Limits;
use crate::cli::ServeArgs;
use crate::conn::{self, ConnLimits};
use crate::engine_thread::{self, EngineHandle, LoopConfig};
use crate::http::{self, AppState, BodyLimits};
use crate::load;
use crate::metrics::Metrics;
use model::chat_template::ChatTemplate;
use model::executor_loader::{cpu_kv_cache_blocks, load_executor};

/// How long connections may take to send their last bytes after the engine's grace ends: the
/// engine has then ended every stream, so only writes of those last events remain.
const DRAIN_AFTER_GRACE: Duration = Duration::from_secs(1);
/// `max_tokens` when a request gives none.
const DEFAULT_MAX_TOKENS: usize = 16;

/// Runs the command; the error is the message to print.
pub fn run(args: &ServeArgs) -> Result<(), String> {
    let main_began = SystemTime::now();
    let mut times = StartTimes::new(|phase| eprintln!("start: {phase}"));
    if args.max_num_seqs == 0 {
        return Err("--max-num-seqs must be at least 1".into());
    }
    if args.max_connections == 0 {
        return Err("--max-connections must be at least 1".into());
    }
    if args.max_queue == 0 {
        return Err("--max-queue must be at least 1: every request waits for a step, if briefly".into());
    }
    if args.max_body_bytes == 0 {
        return Err("--max-body-bytes must be at least 1: every request has a JSON body".into());
    }
    let grace = seconds("--shutdown-timeout", args.shutdown_timeout)?;
    let limits = ConnLimits {
        max_connections: args.max_connections,
        header_timeout: seconds("--header-read-timeout", args.header_read_timeout)?,
        keep_alive_timeout: seconds("--keep-alive-timeout", args.keep_alive_timeout)?,
        drain: grace + DRAIN_AFTER_GRACE,
    };
    let body =
        BodyLimits { max_bytes: args.max_body_bytes, timeout: seconds("--body-read-timeout", args.body_read_timeout)? };
    let reading_config = Instant::now();
    let cfg = ModelConfig::load(&args.model).map_err(|e| e.to_string())?;
    let max_model_len = match args.max_model_len {
        Some(n) if n < 2 || n > cfg.max_position_embeddings => {
            return Err(format!("--max-model-len must be in [2, {}], got {n}", cfg.max_position_embeddings))
        }
        Some(n) => n,
        None => cfg.max_position_embeddings,
    };
    let text_files = spawn_text_files(args.model.clone())?;
    let served_name = match &args.served_model_name {
        Some(name) => name.clone(),
        None => model_folder_name(&args.model)?,
    };

    // The CPU cache holds every running sequence at its longest within --kv-cache-memory.
    let cpu_blocks = match args.engine.device.as_str() {
        "cuda" => 0,
        _ => cpu_kv_cache_blocks(
            &cfg,
            Precision::F32,
            args.max_num_seqs,
            max_model_len,
            args.kv_cache_memory,
            "--kv-cache-memory",
        )
        .map_err(|e| e.to_string())?,
    };
    let opts = args.engine.executor_options(Precision::F32, args.max_num_seqs, max_model_len, cpu_blocks);
    let config_took = reading_config.elapsed();
    eprintln!("loading {}", args.model.display());
    let loaded = load_executor(&args.model, &cfg, &opts, &mut |_, _| {}, &mut times).map_err(|e| e.to_string())?;
    eprintln!("running on {} (step budget {} tokens)", loaded.executor.describe(), loaded.max_batched_tokens);
    let waiting = Instant::now();
    let (text_files, took) = text_files.join().map_err(|_| "the thread loading the tokenizer panicked".to_string())?;
    // The config itself was read on this thread, before the loader began.
    times.record_beside(StartPhase::ConfigTokenizer, config_took + took, config_took + waiting.elapsed());
    let (tokenizer, template) = text_files?;
    let building = Instant::now();
    let sched = load::scheduler_config(args.max_num_seqs, &loaded, max_model_len, !args.scheduling.no_prefix_caching);
    let tokenizer = Arc::new(tokenizer);
    let mut engine = Engine::new(loaded.executor, tokenizer.clone(), sched, false).map_err(|e| e.to_string())?;
    engine.set_pipelining(!args.scheduling.no_pipelining);

    let metrics = Arc::new(Metrics::new());
    let (stop, stopping) = watch::channel(false);
    let loop_config = LoopConfig { max_queue: args.max_queue, grace };
    let (handle, engine_thread) = engine_thread::spawn(engine, loop_config, metrics.clone());
    times.record(StartPhase::Engine, building.elapsed());
    let state = AppState {
        engine: handle.clone(),
        tokenizer,
        template: Arc::new(template),
        limits: Limits {
            max_model_len,
            vocab_size: cfg.vocab_size,
            max_n: 16,
            default_max_tokens: DEFAULT_MAX_TOKENS,
            max_prompt_chars: Limits::prompt_chars_for(max_model_len),
        },
        served_name: served_name.into(),
        api_key: args.api_key.clone().map(Into::into),
        eos_token_ids: cfg.eos_token_id.clone().into(),
        metrics,
        body,
        stopping,
    };

    let start = Start { times, main_began };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| format!("starting the async runtime: {e}"))?;
    let served = runtime.block_on(serve(args, state, limits, handle, stop, start));
    // The engine thread exits once it has drained; after a failed bind it was never asked to, so
    // dropping the runtime (and with it every handle) is what lets it see the end of its channel.
    drop(runtime);
    engine_thread.join().map_err(|_| "the engine thread panicked".to_string())?;
    served
}

async fn serve(
    args: &ServeArgs,
    state: AppState,
    limits: ConnLimits,
    handle: EngineHandle,
    stop: watch::Sender<bool>,
    mut start: Start,
) -> Result<(), String> {
    let binding = Instant::now();
    let (listener, capped) = conn::listen(&args.host, args.port)
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", args.host, args.port))?;
    if let Some(warning) = capped {
        eprintln!("{warning}");
    }
    let addr: SocketAddr = listener.local_addr().map_err(|e| e.to_string())?;
    start.times.record(StartPhase::Bind, binding.elapsed());
    eprintln!("{}", start.summary());
    eprintln!("listening on http://{addr}");
    let router = http::router(state);
    conn::serve(listener, router, limits, async move {
        shutdown_signal().await;
        eprintln!("shutting down: finishing running requests");
        let _ = stop.send(true);
        handle.shutdown();
    })
    .await;
    Ok(())
}

/// The tokenizer and the chat template of the model in `dir`, and how long loading them took.
type TextFiles = (Result<(Tokenizer, ChatTemplate), String>, Duration);

/// Loads `dir`'s tokenizer and chat template on a thread of their own (Qwen3's tokenizer.json
/// alone is 11 MB of vocabulary and merges to build), beside the executor's load.
fn spawn_text_files(dir: PathBuf) -> Result<JoinHandle<TextFiles>, String> {
    std::thread::Builder::new()
        .name("tokenizer-load".into())
        .spawn(move || {
            let start = Instant::now();
            let loaded = load::tokenizer(&dir).and_then(|t| Ok((t, ChatTemplate::from_model_dir(&dir)?)));
            (loaded, start.elapsed())
        })
        .map_err(|e| format!("starting the thread that loads the tokenizer: {e}"))
}

/// The start's phases so far and when `main` began.
struct Start {
    times: StartTimes,
    main_began: SystemTime,
}

impl Start {
    /// The start's summary line, with the Unix time `main` began (for a launcher to subtract its
    /// own launch time from) and the wall time from then.
    fn summary(&self) -> String {
        let since = self.main_began.elapsed().unwrap_or_default();
        let unix = self.main_began.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        format!(
            "{}; {:.3} s from main (began at unix {:.3})",
            self.times.summary(),
            since.as_secs_f64(),
            unix.as_secs_f64()
        )
    }
}

/// A flag's seconds as a duration; the error names the flag.
fn seconds(flag: &str, secs: f64) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("{flag} must be a positive number of seconds, got {secs}")),
    }
}

/// Resolves on the first SIGINT or SIGTERM.
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The last component of the model folder, as clients name the model by default.
fn model_folder_name(dir: &std::path::Path) -> Result<String, String> {
    let canonical = dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))?;
    canonical
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| format!("{}: cannot name the model after this folder; give --served-model-name", dir.display()))
}
