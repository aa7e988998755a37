//! Command-line arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// AsyncT inference engine.
#[derive(Parser, Debug)]
#[command(name = "asynct", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a checkpoint with seeded random weights for a preset.
    Init(InitArgs),
    /// Generate a completion (on the GPU when there is one, else the CPU).
    Generate(GenerateArgs),
    /// Perplexity and next-token accuracy over a text file, every position through the engine.
    Eval(EvalArgs),
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(ServeArgs),
    /// Time the engine: SPEC section 7's end-to-end scenarios and pure decode steps.
    Bench(BenchArgs),
    /// Load a running `asynct serve` (or any OpenAI-compatible server) over HTTP and time it.
    BenchServe(BenchServeArgs),
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// asynct-tiny, asynct-mini, asynct-small or asynct-0.5b.
    #[arg(long)]
    pub preset: String,
    /// Folder to write config.json, model.safetensors and tokenizer.json into.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Checkpoint folder (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    pub model: PathBuf,
    /// Prompt text, tokenised with the checkpoint's tokenizer.
    #[arg(long, conflicts_with = "prompt_ids", required_unless_present = "prompt_ids")]
    pub prompt: Option<String>,
    /// Prompt as comma-separated token ids; the output is then printed as ids too.
    #[arg(long, value_delimiter = ',')]
    pub prompt_ids: Option<Vec<u32>>,
    /// Tokens to generate at most.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Sampling seed (request i of a batch uses seed + i).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when this string appears (repeatable); it is not printed.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Keep generating through end-of-sequence tokens.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Run this many copies of the prompt as one batch.
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub scheduling: SchedulingArgs,
    /// The CPU backend's mode: f32, f64, or bf16 (bf16-faithful). The GPU runs bf16.
    #[arg(long, default_value = "f32")]
    pub precision: String,
    /// Write the logits (f32 [positions, vocab]) of the first request to this safetensors file.
    #[arg(long)]
    pub dump_logits: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// Checkpoint folder (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    pub model: PathBuf,
    /// UTF-8 text file to score, encoded whole with the checkpoint's tokenizer.
    #[arg(long)]
    pub text: PathBuf,
    /// Tokens per window, each scored from position 0 [default: the model's max_position_embeddings].
    #[arg(long)]
    pub max_len: Option<usize>,
    /// Windows run as one batch, at most (fewer when their logits would pass 1 GiB).
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// The CPU backend's mode: f32, f64, or bf16 (bf16-faithful). The GPU runs bf16.
    #[arg(long, default_value = "f32")]
    pub precision: String,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Checkpoint folder (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    pub model: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (the log line names it).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub scheduling: SchedulingArgs,
    /// The model name clients send; the model folder's name by default.
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Requests that run in one step, at most.
    #[arg(long, default_value_t = 64)]
    pub max_num_seqs: usize,
    /// Requests that may wait for a slot; past it the server answers 429.
    #[arg(long, default_value_t = 1024)]
    pub max_queue: usize,
    /// Require `Authorization: Bearer KEY` on /v1 routes.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Longest sequence (prompt plus output) to accept; the model's own limit by default.
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// The CPU KV cache's memory in GiB: room for --max-num-seqs sequences of --max-model-len, at
    /// most this much [default: 4, grown to one sequence of --max-model-len if need be].
    #[arg(long, value_name = "GIB")]
    pub kv_cache_memory: Option<f64>,
    /// Connections open at once, at most; one more is answered 503 and closed.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds from a request's first byte to the end of its headers; past it the connection closes.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub header_read_timeout: f64,
    /// Seconds to read a request body; past it the request gets 408 and the connection closes.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub body_read_timeout: f64,
    /// Seconds a connection may wait for its next request (or its first) before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub keep_alive_timeout: f64,
    /// Bytes of a request body buffered before it is parsed, at most; a longer body gets 413.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Seconds that SIGINT or SIGTERM lets running requests finish before they are aborted and
    /// every connection is closed.
    #[arg(long, value_name = "SECS", default_value_t = 30.0)]
    pub shutdown_timeout: f64,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Checkpoint folder (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    pub model: PathBuf,
    /// An end-to-end scenario of SPEC section 7 (repeatable): prefill_heavy_b16, balanced_b32,
    /// decode_heavy_b32, long_decode_b32, or all.
    #[arg(long)]
    pub scenario: Vec<String>,
    /// Override every scenario's number of requests (small runs and tests).
    #[arg(long)]
    pub requests: Option<usize>,
    /// Override every scenario's prompt length in tokens.
    #[arg(long)]
    pub prompt_len: Option<usize>,
    /// Override every scenario's output length in tokens.
    #[arg(long)]
    pub output_len: Option<usize>,
    /// Time pure decode steps at these batch sizes (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub decode_batch: Vec<usize>,
    /// Context of the timed decode steps (their contexts are centred on it).
    #[arg(long, default_value_t = 1024)]
    pub context: usize,
    /// Decode steps run before the timed ones.
    #[arg(long, default_value_t = 5)]
    pub warmup_steps: usize,
    /// Decode steps timed per batch size.
    #[arg(long, default_value_t = 50)]
    pub steps: usize,
    /// Run the warm-up, then exactly this many decode steps between cuProfilerStart and
    /// cuProfilerStop (for `ncu --profile-from-start off`); one --decode-batch only, or one
    /// --scenario (its first this many steps).
    #[arg(long)]
    pub profile_steps: Option<usize>,
    /// Also time each --decode-batch B (even) as two engines of B/2 requests, each on a CUDA stream
    /// of its own, a step of each in turn: a bound on a step whose batch runs as two halves that
    /// overlap (issue 15's probe). The first engine then takes half of --gpu-memory-utilization.
    #[arg(long)]
    pub decode_twins: bool,
    /// decode_anchor.py's JSON: the decode table gets each batch's ratio to its best variant.
    #[arg(long)]
    pub anchor: Option<PathBuf>,
    /// Requests that run in one step, at most; by default the largest batch the run needs.
    #[arg(long)]
    pub max_num_seqs: Option<usize>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub scheduling: SchedulingArgs,
    /// Seed of the random prompts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Every request's sampling temperature (no top-k or top-p; each request's Philox seed drawn
    /// from --seed); 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Take the prompts from this text file instead of random ids: tokenised with the model's
    /// tokenizer, each request's prompt a different window of it (spread evenly from its start to
    /// its end, the same on every run), so the gate statistics are those of real text.
    #[arg(long)]
    pub prompt_text: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BenchServeArgs {
    /// The server, as http://HOST:PORT[/PREFIX]; every request goes there and nowhere else.
    #[arg(long)]
    pub url: String,
    /// The model name requests carry; by default the first one the server's /v1/models lists.
    #[arg(long)]
    pub model: Option<String>,
    /// Requests to time.
    #[arg(long, default_value_t = 256)]
    pub num_prompts: usize,
    /// Requests in flight at once, at most; by default every request as soon as it arrives.
    #[arg(long)]
    pub max_concurrency: Option<usize>,
    /// Requests per second, arriving as a Poisson process; by default all at once.
    #[arg(long)]
    pub request_rate: Option<f64>,
    /// Prompt tokens of each request (the centre of the range with --range-ratio).
    #[arg(long, default_value_t = 128)]
    pub input_len: usize,
    /// Tokens each request generates (`max_tokens`, with `ignore_eos`, so exactly this many).
    #[arg(long, default_value_t = 256)]
    pub output_len: usize,
    /// Draw each length uniformly from [len * (1 - r), len * (1 + r)]; 0 keeps them fixed.
    #[arg(long, default_value_t = 0.0)]
    pub range_ratio: f64,
    /// ids: prompts of seeded random token ids (the same ids as `asynct bench` draws for the same
    /// seed and vocabulary); text: seeded random words, tokenised by the server.
    #[arg(long, default_value = "ids")]
    pub prompt_kind: String,
    /// The model's vocabulary size (config.json's vocab_size): token-id prompts are drawn below it.
    #[arg(long)]
    pub vocab_size: Option<usize>,
    /// Seed of the prompts, the lengths and the arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Untimed requests sent one at a time before the timed ones.
    #[arg(long, default_value_t = 1)]
    pub num_warmups: usize,
    /// Seconds one request may take; past it the request counts as failed.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub request_timeout: f64,
    /// Seconds the whole timed run may take; past it nothing more is sent and requests still
    /// running count as failed.
    #[arg(long, value_name = "SECS", default_value_t = 3600.0)]
    pub max_duration: f64,
    /// Sent as `Authorization: Bearer KEY`.
    #[arg(long)]
    pub api_key: Option<String>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
}

/// Where the model runs and how a GPU step launches: the flags that `generate`, `eval`, `serve`
/// and `bench` share.
#[derive(Args, Debug)]
pub struct EngineArgs {
    /// auto (the GPU when one is there), cpu or cuda.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// The fraction of GPU memory the weights, buffers and KV cache may take together.
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// Run every GPU step eagerly: no whole-step CUDA graphs (start-up is faster, decode slower).
    #[arg(long)]
    pub enforce_eager: bool,
    /// How a GPU decode step launches its layers: graph (five kernels a layer), mega (the
    /// persistent megakernel where the batch fits it) or auto (the faster one by batch, as
    /// measured).
    #[arg(long, default_value = "auto", value_name = "auto|graph|mega")]
    pub decode_kernel: String,
    /// Query tokens one step may carry (vLLM's name): whole 512-token prefill chunks beside a
    /// decode row of each running request; at least 512 plus the requests one step runs
    /// (--batch or --max-num-seqs) [default: 16384 plus those requests on the GPU, 2048 plus them
    /// on the CPU].
    #[arg(long, value_name = "N")]
    pub max_num_batched_tokens: Option<usize>,
}

/// How the engine schedules the requests it is given: the flags of the commands that generate.
#[derive(Args, Debug)]
pub struct SchedulingArgs {
    /// Turn prefix caching off. By default the KV blocks of prompt tokens computed in whole
    /// 512-token chunks are kept after their request ends and reused by later requests that
    /// start with the same tokens; a hit changes no token or logit.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Plan each step only once the step before has drawn its tokens. By default the next step
    /// is planned and queued before the current one is waited for (vLLM's asynchronous
    /// scheduling), so that a device need not wait for the host; the tokens are the same bits
    /// either way.
    #[arg(long)]
    pub no_pipelining: bool,
}

#[cfg(test)]
mod tests {
    use model::cpu_backend::Precision;

    use super::*;

    const ENGINE_FLAGS: [&str; 9] = [
        "--device",
        "cpu",
        "--gpu-memory-utilization",
        "0.5",
        "--enforce-eager",
        "--decode-kernel",
        "mega",
        "--max-num-batched-tokens",
        "4096",
    ];

    fn parse<'a>(command: &'a str, flags: &[&'a str]) -> Result<Command, clap::Error> {
        let required: &[&str] = match command {
            "generate" => &["--prompt", "x"],
            "eval" => &["--text", "t.txt"],
            _ => &[],
        };
        let argv = ["asynct", command, "--model", "m"].into_iter().chain(required.iter().copied());
        Cli::try_parse_from(argv.chain(flags.iter().copied())).map(|cli| cli.command)
    }

    fn engine_and_scheduling(command: &Command) -> (&EngineArgs, Option<&SchedulingArgs>) {
        match command {
            Command::Generate(a) => (&a.engine, Some(&a.scheduling)),
            Command::Eval(a) => (&a.engine, None),
            Command::Serve(a) => (&a.engine, Some(&a.scheduling)),
            Command::Bench(a) => (&a.engine, Some(&a.scheduling)),
            other => panic!("{other:?} runs no engine"),
        }
    }

    #[test]
    fn every_engine_command_takes_the_engine_flags_into_its_executor_options() {
        for command in ["generate", "eval", "serve", "bench"] {
            let parsed = parse(command, &ENGINE_FLAGS).unwrap_or_else(|e| panic!("{command}: {e}"));
            let (engine, _) = engine_and_scheduling(&parsed);
            let opts = engine.executor_options(Precision::Bf16, 3, 100, 7);
            assert_eq!(opts.device, "cpu", "{command}");
            assert_eq!(opts.gpu_memory_utilization, 0.5, "{command}");
            assert!(opts.enforce_eager, "{command}");
            assert_eq!(opts.decode_kernel, "mega", "{command}");
            assert_eq!(opts.max_num_batched_tokens, Some(4096), "{command}");
            let sizes = (opts.precision, opts.max_num_seqs, opts.max_model_len, opts.cpu_blocks);
            assert_eq!(sizes, (Precision::Bf16, 3, 100, 7), "{command}");

            let defaults = parse(command, &[]).unwrap_or_else(|e| panic!("{command}: {e}"));
            let opts = engine_and_scheduling(&defaults).0.executor_options(Precision::F32, 1, 1, 1);
            let flags = (opts.device, opts.gpu_memory_utilization, opts.enforce_eager, opts.decode_kernel);
            assert_eq!(flags, ("auto", 0.9, false, "auto"), "{command}");
            assert_eq!(opts.max_num_batched_tokens, None, "{command}");
        }
    }

    #[test]
    fn the_commands_that_generate_take_the_scheduling_flags_and_eval_refuses_them() {
        for command in ["generate", "serve", "bench"] {
            let parsed = parse(command, &["--no-prefix-caching", "--no-pipelining"]).expect(command);
            let scheduling = engine_and_scheduling(&parsed).1.expect(command);
            assert!(scheduling.no_prefix_caching && scheduling.no_pipelining, "{command}");
            let defaults = parse(command, &[]).expect(command);
            let scheduling = engine_and_scheduling(&defaults).1.expect(command);
            assert!(!scheduling.no_prefix_caching && !scheduling.no_pipelining, "{command}");
        }
        // eval scores every prompt row, so it caches no prefix: it takes neither flag.
        for flag in ["--no-prefix-caching", "--no-pipelining"] {
            assert!(parse("eval", &[flag]).is_err(), "eval {flag}");
        }
    }
}
