//! The CPU backend: the oracle's forward pass and sampler as a [`StepExecutor`].
//!
//! The same code is the reference and the backend: `f32` for speed, `f64` for the exact
//! reference, and `bf16` for the bf16-faithful mode (f64 arithmetic rounded to bf16 at the
//! points the GPU model rounds, SPEC section 4). Tokens are drawn with the oracle's
//! [`draw`](oracle::decode::draw) (processors, then the sampler) from the f32 logits, the same f32
//! values the GPU sampler reads.
//!
//! A step whose rows all draw plainly and that wants at most its scored rows' logits is queued
//! ([`Submitted::InFlight`]) and computed when collected, in order, so the engine plans the next
//! step ahead of its draws on the CPU exactly as over the GPU: a row whose token is
//! [`PENDING_TOKEN`] takes the token the step before drew for its sequence. The CPU gains no
//! overlap from it (the forward runs on the engine's thread), but every path above the executor
//! runs as it does on the GPU, tested without one.
//!
//! For the decode bench's gate statistics it counts the HP1 gate's exact zeros
//! ([`StepExecutor::measure_gates`]) from the oracle's own scores and gate, over steps of decode
//! rows only (a step with a prefill chunk is refused while counting, since the count would mix
//! its rows in).

use std::collections::{HashMap, VecDeque};
use std::str::FromStr;

use ndarray::Axis;
use rayon::prelude::*;

use oracle::decode::sampler::SamplingParams;
use oracle::model::forward::{GateStats, Model};
use oracle::model::kv_cache::KvCache;
use oracle::model::precision::Rounding;
use oracle::model::step::{LogitRows, StepInput};
use oracle::Scalar;

use crate::block_pool::KvCapacity;
use crate::error::{Error, Result};
use crate::executor::{sampling_seqs, scored_rows, LogitsWanted, SamplingRow, StepExecutor, StepOutput, Submitted};
use crate::scheduler::{StepPlan, PENDING_TOKEN};

/// The oracle mode a CPU backend computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 arithmetic throughout.
    F32,
    /// f64 arithmetic throughout: the reference.
    F64,
    /// f64 arithmetic rounded to bf16 where the GPU model rounds.
    Bf16,
}

impl FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Self::F32),
            "f64" => Ok(Self::F64),
            "bf16" => Ok(Self::Bf16),
            other => Err(Error::Request(format!("precision must be f32, f64 or bf16, got `{other}`"))),
        }
    }
}

/// An oracle model and its paged KV cache.
pub struct CpuExecutor<T> {
    model: Model<T>,
    cache: KvCache<T>,
    label: String,
    /// The gate counts since [`StepExecutor::measure_gates`] turned counting on.
    gates: Option<GateStats>,
    /// Steps submitted and not yet computed, oldest first.
    queued: VecDeque<QueuedStep>,
    /// The token the last step computed drew for each of its sampling sequences.
    drawn: HashMap<u64, u32>,
}

/// A step the CPU executor queued: its plan, each sampling row's parameters, sampling step and
/// [`SamplingRow::scored`], and the logits it hands back.
struct QueuedStep {
    plan: StepPlan,
    rows: Vec<(SamplingParams, u64, bool)>,
    wanted: LogitsWanted,
}

impl<T: Scalar> CpuExecutor<T> {
    /// An executor with a cache of `num_blocks` blocks of `block_size` tokens.
    pub fn new(model: Model<T>, num_blocks: usize, block_size: usize, label: impl Into<String>) -> Self {
        let cache = KvCache::new(&model.dims, num_blocks, block_size);
        Self { model, cache, label: label.into(), gates: None, queued: VecDeque::new(), drawn: HashMap::new() }
    }

    /// Computes `plan`, each pending token replaced by the one the step before drew.
    fn run(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], wanted: &LogitsWanted) -> Result<StepOutput> {
        let fed;
        let plan = match plan.token_ids.contains(&PENDING_TOKEN) {
            false => plan,
            true => {
                let mut with_tokens = plan.clone();
                for (i, p) in plan.seqs.iter().enumerate() {
                    let row = plan.rows(i).start;
                    if with_tokens.token_ids[row] == PENDING_TOKEN {
                        with_tokens.token_ids[row] = *self.drawn.get(&p.id).ok_or_else(|| {
                            Error::Executor(format!("request {}: a pending token the step before did not draw", p.id))
                        })?;
                    }
                }
                fed = with_tokens;
                &fed
            }
        };
        let out = self.forward_and_draw(plan, sampling, wanted)?;
        let sampling_ids = plan.seqs.iter().filter(|p| p.samples).map(|p| p.id);
        self.drawn = sampling_ids.zip(out.sampled.iter().copied()).collect();
        Ok(out)
    }

    fn forward_and_draw(
        &mut self,
        plan: &StepPlan,
        sampling: &[SamplingRow<'_>],
        wanted: &LogitsWanted,
    ) -> Result<StepOutput> {
        let seqs = sampling_seqs(plan, sampling)?;
        let query_rows = wanted.query_rows(plan.token_ids.len())?;
        // Under `QueryRows` the LM head runs on the rows asked for and the sampled rows alone.
        let listed: Vec<usize> = match wanted {
            LogitsWanted::QueryRows(_) => {
                let mut listed: Vec<usize> =
                    query_rows.iter().copied().chain(seqs.iter().map(|&i| plan.last_row(i))).collect();
                listed.sort_unstable();
                listed.dedup();
                listed
            }
            LogitsWanted::Discard | LogitsWanted::ScoredRows => Vec::new(),
        };
        let at = |r: &usize| listed.binary_search(r).expect("every row read is listed");
        let rows = match wanted {
            LogitsWanted::QueryRows(_) => LogitRows::Listed(&listed),
            LogitsWanted::Discard | LogitsWanted::ScoredRows => LogitRows::LastPerSeq,
        };
        let step =
            StepInput { token_ids: &plan.token_ids, meta: &plan.meta, slot_mapping: &plan.slot_mapping, logits: rows };
        let logits = match self.gates.as_mut() {
            None => self.model.forward(&step, &mut self.cache)?,
            Some(counted) => {
                if let Some(p) = plan.seqs.iter().find(|p| p.len != 1) {
                    return Err(Error::Executor(format!(
                        "the CPU backend counts the gate over steps of decode rows only, but sequence {} brought {} \
                         query tokens",
                        p.id, p.len
                    )));
                }
                let (logits, stats) = self.model.forward_with_stats(&step, &mut self.cache)?;
                *counted += stats;
                logits
            }
        }
        .mapv(|x| x.f64() as f32);
        let logits_row = |i: usize| match wanted {
            LogitsWanted::QueryRows(_) => at(&plan.last_row(i)),
            LogitsWanted::Discard | LogitsWanted::ScoredRows => i,
        };
        // In parallel: a row's processors and sampler take 0.3 to 5 ms at Qwen3's vocabulary.
        let sampled = seqs
            .par_iter()
            .zip(sampling)
            .map(|(&i, row)| {
                let r = logits.row(logits_row(i));
                row.draw(r.as_slice().expect("logits rows are contiguous"))
            })
            .collect::<Result<Vec<u32>>>()?;
        let logits = match wanted {
            LogitsWanted::Discard => None,
            LogitsWanted::ScoredRows => {
                let scored: Vec<usize> = scored_rows(sampling).into_iter().map(|j| seqs[j]).collect();
                Some(logits.select(Axis(0), &scored))
            }
            LogitsWanted::QueryRows(_) => Some(logits.select(Axis(0), &query_rows.iter().map(at).collect::<Vec<_>>())),
        };
        Ok(StepOutput { sampled, logits })
    }
}

impl<T: Scalar> StepExecutor for CpuExecutor<T> {
    fn execute(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], wanted: &LogitsWanted) -> Result<StepOutput> {
        if !self.queued.is_empty() {
            return Err(Error::Executor("a step run at once while others are queued".into()));
        }
        self.run(plan, sampling, wanted)
    }

    /// Queues a step whose rows have no processors and that wants at most its scored rows'
    /// logits, unless the gate is being counted; runs any other at once.
    fn submit(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], wanted: &LogitsWanted) -> Result<Submitted> {
        let plain = sampling.iter().all(|r| r.processing.is_none());
        if matches!(wanted, LogitsWanted::QueryRows(_)) || !plain || self.gates.is_some() {
            return Ok(Submitted::Done(self.execute(plan, sampling, wanted)?));
        }
        sampling_seqs(plan, sampling)?;
        let rows = sampling.iter().map(|r| (r.params, r.step, r.scored)).collect();
        self.queued.push_back(QueuedStep { plan: plan.clone(), rows, wanted: wanted.clone() });
        Ok(Submitted::InFlight)
    }

    fn collect(&mut self) -> Result<StepOutput> {
        let QueuedStep { plan, rows, wanted } =
            self.queued.pop_front().ok_or_else(|| Error::Executor("no step is in flight".into()))?;
        let rows: Vec<SamplingRow> = rows
            .into_iter()
            .map(|(params, step, scored)| SamplingRow { scored, ..SamplingRow::plain(params, step) })
            .collect();
        self.run(&plan, &rows, &wanted)
    }

    fn kv_capacity(&self) -> KvCapacity {
        KvCapacity { num_blocks: self.cache.num_blocks(), block_size: self.cache.block_size() }
    }

    fn vocab_size(&self) -> usize {
        self.model.dims.vocab_size
    }

    fn describe(&self) -> String {
        self.label.clone()
    }

    fn measure_gates(&mut self, on: bool) -> Result<bool> {
        self.gates = on.then(GateStats::default);
        Ok(true)
    }

    fn gate_counts(&mut self) -> Result<Option<(u64, u64)>> {
        Ok(self.gates.map(|g| (g.zeros, g.total)))
    }
}

/// The rounding a precision implies.
pub fn rounding_of(p: Precision) -> Rounding {
    match p {
        Precision::Bf16 => Rounding::Bf16,
        Precision::F32 | Precision::F64 => Rounding::Exact,
    }
}

/// Loads the checkpoint in `dir` into a CPU executor computing in `precision`, with a cache of
/// `num_blocks` blocks of `block_size` tokens. `progress(done, total)` follows the tensors.
pub fn load_cpu_executor(
    dir: &std::path::Path,
    cfg: &crate::config::ModelConfig,
    precision: Precision,
    num_blocks: usize,
    block_size: usize,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Box<dyn StepExecutor>> {
    check_cpu_cache(cfg, precision, num_blocks, block_size)?;
    let label = format!("cpu {precision:?}").to_lowercase();
    let rounding = rounding_of(precision);
    Ok(match precision {
        Precision::F32 => {
            let w = crate::checkpoint::load_weights::<f32>(dir, cfg, progress)?;
            Box::new(CpuExecutor::new(Model::new(cfg.dims(), w, rounding)?, num_blocks, block_size, label))
        }
        Precision::F64 | Precision::Bf16 => {
            let w = crate::checkpoint::load_weights::<f64>(dir, cfg, progress)?;
            Box::new(CpuExecutor::new(Model::new(cfg.dims(), w, rounding)?, num_blocks, block_size, label))
        }
    })
}

/// Bytes of one KV-cache block of `block_size` tokens on the CPU (keys and values of every layer,
/// in the arithmetic's type: f64 for f64 and bf16-faithful); `None` when that overflows.
pub fn cpu_block_bytes(cfg: &crate::config::ModelConfig, precision: Precision, block_size: usize) -> Option<u64> {
    let elem: u64 = if precision == Precision::F32 { 4 } else { 8 };
    [cfg.num_hidden_layers, 2, block_size, cfg.num_key_value_heads, cfg.head_dim]
        .into_iter()
        .try_fold(elem, |acc, n| acc.checked_mul(n as u64))
}

/// Refuses, before any of it is allocated, a CPU cache of `num_blocks` blocks whose size overflows
/// or passes this machine's memory, and one the allocator cannot reserve.
fn check_cpu_cache(
    cfg: &crate::config::ModelConfig,
    precision: Precision,
    num_blocks: usize,
    block_size: usize,
) -> Result<()> {
    let bytes = cpu_block_bytes(cfg, precision, block_size).and_then(|b| b.checked_mul(num_blocks as u64));
    let what = || format!("the CPU KV cache ({num_blocks} blocks of {block_size} tokens)");
    let hint = "lower max_model_len, max_num_seqs or the CPU KV cache's memory";
    check_host_bytes(what, bytes, hint)?;
    // The limit above is the machine's; the allocator (or an overcommit policy) may still refuse
    // less, and Rust aborts when a plain allocation fails. A reservation probed and given back
    // turns that into an error; the untouched pages cost nothing.
    let bytes = bytes.unwrap_or(u64::MAX);
    let mut probe: Vec<u8> = Vec::new();
    if usize::try_from(bytes).map_or(true, |n| probe.try_reserve_exact(n).is_err()) {
        return Err(Error::Memory {
            what: what(),
            need: format_bytes(bytes),
            limit: "what the allocator would reserve".into(),
            hint: hint.into(),
        });
    }
    Ok(())
}

/// Bytes of memory this process may use: the machine's `MemTotal`, or its cgroup's `memory.max`
/// when lower; `None` where neither can be read (then only overflow is checked).
pub fn host_memory_bytes() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
        line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?.checked_mul(1024)
    });
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|s| s.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Refuses a host buffer of `bytes` (`None`: its size overflowed) that passes this machine's
/// memory, as an [`Error::Memory`] naming `what` and `hint`.
pub fn check_host_bytes(what: impl FnOnce() -> String, bytes: Option<u64>, hint: &str) -> Result<()> {
    let limit = host_memory_bytes();
    let fits = match (bytes, limit) {
        (None, _) => false,
        (Some(b), Some(limit)) => b <= limit,
        (Some(_), None) => true,
    };
    if fits {
        return Ok(());
    }
    Err(Error::Memory {
        what: what(),
        need: bytes.map_or_else(|| "more than 2^64 bytes".into(), format_bytes),
        limit: limit.map_or_else(
            || "what can be addressed".into(),
            |l| format!("this machine's {} of memory", format_bytes(l)),
        ),
        hint: hint.into(),
    })
}

/// `bytes` in the largest binary unit that keeps it at least 1 (`1.5 GiB`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::Preset;

    #[test]
    fn format_bytes_picks_the_unit() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 29), "1.5 GiB");
        assert_eq!(format_bytes(1 << 40), "1.0 TiB");
    }

    #[test]
    fn a_cache_past_memory_or_overflowing_is_an_error_not_an_abort() {
        let cfg = Preset::Tiny.config();
        for blocks in [usize::MAX, 1 << 50] {
            let err = check_cpu_cache(&cfg, Precision::F32, blocks, 16).unwrap_err();
            assert!(matches!(err, Error::Memory { .. }), "{err}");
            assert!(err.to_string().contains(&format!("the CPU KV cache ({blocks} blocks of 16 tokens)")), "{err}");
        }
        check_cpu_cache(&cfg, Precision::F32, 8, 16).unwrap();
        assert_eq!(cpu_block_bytes(&cfg, Precision::F64, 16), Some(2 * 2 * 16 * 2 * 16 * 8));
    }
}
