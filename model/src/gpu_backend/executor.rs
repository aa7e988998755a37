//! The GPU backend as a [`StepExecutor`]: a planned step through [`GpuModel`], then the tokens
//! drawn on the device by the sampler kernel, which draws the oracle's token from the same logits
//! (SPEC section 5), so only one id per sampling sequence comes back to the host.
//!
//! The forward wants a step's decode rows first (they run on the decode kernels, never in a
//! tensor-core launch with a neighbour's chunk); the scheduler orders sequences by age, so the
//! executor runs the step in that order, decode sequences first, and maps the logits back. A
//! row's result does not depend on where it sits in the step, so the order changes no bit.
//!
//! A row whose request sets a parameter the kernel lacks (logits processors:
//! [`SamplingRow::on_device`]) takes the host path: the step's picked logits rows come back and
//! the oracle's `draw`, the same function the CPU backend calls, picks its token from the raw
//! row. Every other row keeps the device's token whatever its neighbours ask, so a request's
//! tokens do not depend on its batch. Only the rows the host reads are copied: those it draws
//! again, those whose tokens' logprobs are wanted ([`LogitsWanted::ScoredRows`]) and the query
//! rows asked for ([`LogitsWanted::QueryRows`]: a prompt's logprobs, `--dump-logits`), never a
//! plain neighbour's (128 rows of Qwen3's vocabulary are 39 MB of bf16). The LM head runs on the
//! sampled rows first and the other rows asked for after them, so the sampler reads the same
//! first rows as in any other step.
//!
//! With `cuda_graphs`, a step of decode rows only (the steady state of generation) replays the
//! whole-step graph of its bucket, sampler included ([`super::decode_graphs`]); every other step
//! runs eagerly.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, PinnedHostSlice};
use half::bf16;
use ndarray::{Array2, Axis};
use rayon::prelude::*;

use gpu::attention::DecodeAttention;
use gpu::gemm::CublasLt;
use gpu::ops::fault::describe as describe_faults;
use gpu::ops::{Sampler, SamplingRow as DeviceSamplingRow, StepResults};
use gpu::Gpu;

use super::decode_graphs::{pad_decode_step, DecodeGraphs};
use super::decode_kernel::DecodeKernel;
use super::decode_order::decodes_first;
use super::forward::{widen_rows, GpuModel, KvSize};
use super::in_flight::{drawn_on_device, InFlightRing};
use super::landing::Landing;
use super::pending_feed::{feed_runs, FeedRun};
use super::step_buffers::{picked_extra, Capacity, DeviceStep};
use crate::block_pool::blocks_for;
use crate::block_pool::KvCapacity;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::executor::{
    sampling_seqs, scored_rows, LogitsWanted, SamplingRow, StepExecutor, StepOutput, StepPhases, Submitted, TraceWindow,
};
use crate::scheduler::StepPlan;
use crate::start_times::{StartPhase, StartTimes};

/// What a GPU executor is built for: its step limits and how much memory its cache may take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GpuOptions {
    /// Sequences in one step, at most.
    pub max_num_seqs: usize,
    /// Query tokens in one step, at most.
    pub max_batched_tokens: usize,
    /// Longest sequence, prompt and output.
    pub max_model_len: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// The fraction of device memory the weights, buffers and cache may use together.
    pub memory_utilization: f64,
    /// Capture a whole-step CUDA graph of the pure decode step for each batch bucket at load.
    pub cuda_graphs: bool,
    /// How pure decode steps launch their layers.
    pub decode_kernel: DecodeKernel,
    /// The KV cache in blocks instead of from `memory_utilization` (tests force preemption
    /// with a small one).
    pub kv_blocks: Option<usize>,
}

impl GpuOptions {
    /// The step buffers' capacity these options ask for.
    pub fn capacity(&self) -> Capacity {
        Capacity {
            max_tokens: self.max_batched_tokens,
            max_seqs: self.max_num_seqs,
            max_blocks_per_seq: blocks_for(self.max_model_len, self.block_size),
        }
    }
}

/// The model on the GPU, its sampler and the buffers the sampler reads and writes.
pub struct GpuExecutor {
    model: GpuModel,
    sampler: Sampler,
    /// The sampling parameters, copied in the step's batch of input copies.
    params: CudaSlice<DeviceSamplingRow>,
    tokens: CudaSlice<u32>,
    /// The drawn tokens' copy on the host (page-locked: read in the fault word's wait).
    tokens_host: PinnedHostSlice<u32>,
    /// Writes a queued step's tokens and fault word into its landing.
    results: StepResults,
    survivors: CudaSlice<u32>,
    graphs: Option<DecodeGraphs>,
    replay: bool,
    /// Steps that replayed an even-rows graph ([`DecodeAttention::Even`]).
    even_replays: u64,
    /// Steps submitted and not collected and where their results land ([`StepExecutor::submit`]).
    in_flight: InFlightRing<Landing>,
    /// Each sequence the last step drew for on the device, by its index in the draws (the
    /// tokens a step planned ahead reads: [`super::pending_feed`]).
    drawn: HashMap<u64, usize>,
    /// Whether the gate's zeros are being counted ([`StepExecutor::measure_gates`]).
    measuring: bool,
    /// Whether queued steps are timed in phases ([`StepExecutor::mark_steps`]), and the phases
    /// of those collected since.
    marking: bool,
    phases: Vec<StepPhases>,
    gpu: Arc<Gpu>,
    label: String,
}

/// The sampler and the buffers it reads and writes, apart from the model so that a graph can
/// record the forward and then the sampler.
struct SamplerParts<'a> {
    sampler: &'a Sampler,
    params: &'a CudaSlice<DeviceSamplingRow>,
    tokens: &'a mut CudaSlice<u32>,
    survivors: &'a mut CudaSlice<u32>,
}

impl SamplerParts<'_> {
    /// Enqueues the draw of row `j`'s token with `params[j]`, for the first `rows` rows of the
    /// model's last logits.
    fn enqueue(&mut self, model: &mut GpuModel, rows: usize) -> Result<()> {
        let vocab = model.dims().vocab_size;
        let (logits, faults) = model.logits_and_faults(rows);
        self.sampler.sample(
            &logits,
            vocab,
            &self.params.slice(..rows),
            &mut self.tokens.slice_mut(..rows),
            &mut self.survivors.slice_mut(..rows),
            faults,
        )?;
        Ok(())
    }
}

impl GpuExecutor {
    /// Loads the checkpoint in `dir` as raw bf16 onto `gpu` and sizes its cache from the memory
    /// left (`progress(done, total)` follows the tensors, then the layers' upload); each phase's
    /// wall time goes to `times`.
    ///
    /// cuBLASLt (a library of half a gigabyte to map, then its handle and workspace) opens on a
    /// thread of its own while the checkpoint is read, rather than on the first prefill step,
    /// which would otherwise pay it; it is joined before the cache is sized, so the cache's size
    /// does not depend on which finished first.
    pub fn load(
        gpu: &Arc<Gpu>,
        dir: &Path,
        cfg: &ModelConfig,
        options: GpuOptions,
        progress: &mut dyn FnMut(usize, usize),
        times: &mut StartTimes,
    ) -> Result<Self> {
        let opening = {
            let gpu = gpu.clone();
            std::thread::Builder::new()
                .name("cublaslt-open".into())
                .spawn(move || {
                    let start = Instant::now();
                    let opened = CublasLt::shared(&gpu).map(drop);
                    (opened, start.elapsed())
                })
                .map_err(|e| Error::Executor(format!("starting the thread that opens cuBLASLt: {e}")))?
        };
        let weights =
            times.time(StartPhase::CheckpointRead, || crate::checkpoint::load_weights::<bf16>(dir, cfg, progress));
        let waiting = Instant::now();
        let (opened, took) =
            opening.join().map_err(|_| Error::Executor("the thread opening cuBLASLt panicked".into()))?;
        times.record_beside(StartPhase::Cublaslt, took, waiting.elapsed());
        let weights = weights?;
        opened?;
        let cap = options.capacity();
        let kv = match options.kv_blocks {
            Some(blocks) => KvSize::Blocks(blocks),
            None => KvSize::MemoryFraction(options.memory_utilization),
        };
        // What is not the weights' layout and upload (which the model records) is its buffers.
        let building = Instant::now();
        let recorded = times.phases().len();
        let mut model = GpuModel::new(gpu, cfg.dims(), &weights, kv, options.block_size, cap, progress, times)?;
        model.set_decode_kernel(options.decode_kernel);
        drop(weights);
        let rows = options.max_num_seqs;
        let mut executor = Self {
            sampler: Sampler::new(gpu)?,
            params: gpu.upload(&vec![greedy(); rows])?,
            tokens: gpu.zeros(rows)?,
            tokens_host: gpu.pinned(rows)?,
            results: StepResults::new(gpu)?,
            survivors: gpu.zeros(rows)?,
            model,
            graphs: None,
            replay: true,
            even_replays: 0,
            in_flight: InFlightRing::new(vec![Landing::new(gpu, rows)?, Landing::new(gpu, rows)?]),
            drawn: HashMap::new(),
            measuring: false,
            marking: false,
            phases: Vec::new(),
            gpu: gpu.clone(),
            label: String::new(),
        };
        // The cache's zeroing is asynchronous: waited for here, it is counted where it is made.
        gpu.synchronize()?;
        let uploading: Duration = times.phases()[recorded..].iter().map(|p| p.took).sum();
        times.record(StartPhase::BuffersKvCache, building.elapsed().saturating_sub(uploading));
        if options.cuda_graphs {
            let capturing = Instant::now();
            let (mut parts, model) = executor.parts();
            let graphs = DecodeGraphs::capture(
                model,
                rows,
                cap.max_blocks_per_seq,
                options.block_size,
                |m, r| parts.enqueue(m, r),
                progress,
            )?;
            executor.graphs = Some(graphs);
            gpu.synchronize()?;
            times.record(StartPhase::DecodeGraphs, capturing.elapsed());
        }
        let info = gpu.info();
        let cache = executor.model.cache();
        executor.label = format!(
            "cuda {} ({:.2} GiB of weights, KV cache {} blocks = {} tokens, {})",
            info.name,
            executor.model.weight_bytes() as f64 / (1u64 << 30) as f64,
            cache.num_blocks,
            cache.num_blocks * cache.block_size,
            match &executor.graphs {
                Some(g) => format!("{} decode-step CUDA graphs", g.len()),
                None => "eager".to_string(),
            }
        );
        executor.label.push_str(&format!(", decode kernel {}", options.decode_kernel.name()));
        Ok(executor)
    }

    /// The sampler's parts and the model, borrowed apart.
    fn parts(&mut self) -> (SamplerParts<'_>, &mut GpuModel) {
        let parts = SamplerParts {
            sampler: &self.sampler,
            params: &self.params,
            tokens: &mut self.tokens,
            survivors: &mut self.survivors,
        };
        (parts, &mut self.model)
    }

    /// Adds to the model's batch of input copies each row's sampling settings, then greedy
    /// settings for the padding rows up to `rows`.
    fn stage_params(&mut self, sampling: &[SamplingRow<'_>], rows: usize) -> Result<()> {
        let mut params = sampling
            .iter()
            .map(|r| {
                let p = &r.params;
                Ok(DeviceSamplingRow::new(p.temperature, p.top_k, p.top_p, p.min_p, p.seed, r.step)?)
            })
            .collect::<Result<Vec<_>>>()?;
        params.resize(rows.max(params.len()), greedy());
        Ok(self.model.inputs().stage(&params, &mut self.params.slice_mut(..params.len()))?)
    }

    /// Whether pure decode steps replay their bucket's graph (when graphs were captured); off,
    /// every step runs eagerly. The bits are the same either way (`gpu_engine` checks it).
    pub fn set_graph_replay(&mut self, on: bool) {
        self.replay = on;
    }

    /// The bf16 logits of the last step's first `rows` sampled rows (in sampling order), widened
    /// to f32 (waits for the device).
    pub fn last_logits(&self, rows: usize) -> Result<Array2<f32>> {
        self.model.download_logit_rows(&(0..rows).collect::<Vec<_>>())
    }

    /// Waits for the step, checks its fault word and returns the first `n` sampled tokens.
    fn finish(&mut self, n: usize) -> Result<Vec<u32>> {
        let (tokens, host) = (&self.tokens, &mut self.tokens_host);
        self.model.faults().check_after(|stream| Ok(stream.memcpy_dtoh(&tokens.slice(..n), host)?))?;
        Ok(self.tokens_host.as_slice().map_err(gpu::Error::from)?[..n].to_vec())
    }

    /// Enqueues a step of decode rows only (in sampling order) as a replay of its bucket's graph,
    /// with `feed`'s copies behind the upload; false when no bucket holds it.
    fn replay_decode(&mut self, step: &DeviceStep<'_>, sampling: &[SamplingRow<'_>], feed: &[FeedRun]) -> Result<bool> {
        // The graphs were captured without the gate counters: a step being measured runs eagerly.
        let graphs = self.graphs.as_ref().filter(|_| self.replay && !self.measuring);
        let Some(bucket) = graphs.and_then(|g| g.bucket(&step.meta.seq_lens, step.meta.block_table.ncols())) else {
            return Ok(false);
        };
        let shape = bucket.shape;
        let padded = pad_decode_step(step, shape);
        let uploaded = self.model.upload(&padded.step())?;
        debug_assert_eq!(uploaded, shape, "a padded step has its bucket's shape");
        self.model.feed_ids(&self.tokens, feed)?;
        self.stage_params(sampling, shape.tokens)?;
        self.model.upload_inputs()?;
        if let Some(marks) = self.in_flight.vacant()?.marks() {
            marks.inputs(self.gpu.stream())?;
        }
        self.graphs.as_ref().expect("a bucket was found").replay(bucket)?;
        self.even_replays += u64::from(bucket.attention == DecodeAttention::Even);
        Ok(true)
    }

    /// Enqueues the draw of `sampling[j]`'s token from row `j` of the model's last logits.
    fn sample_on_device(&mut self, sampling: &[SamplingRow<'_>]) -> Result<()> {
        self.model.inputs().begin();
        self.stage_params(sampling, sampling.len())?;
        self.model.end_inputs()?;
        let (mut parts, model) = self.parts();
        parts.enqueue(model, sampling.len())
    }

    /// Enqueues `plan` with a token drawn on the device for each sampling sequence (the host
    /// redraws the rows that are not [`SamplingRow::on_device`] afterwards), each pending token
    /// copied from the step before's draws; records which sequences this step draws for. The
    /// logits rows are the sampling rows', in sampling order, then those of the plan rows `extra`
    /// (ascending) that are not among them: returns each extra row's logits row.
    fn enqueue_draws(
        &mut self,
        plan: &StepPlan,
        sampling: &[SamplingRow<'_>],
        seqs: &[usize],
        extra: &[usize],
    ) -> Result<Vec<usize>> {
        let (lens, (ids, meta, slots, row_of)) = decodes_first(plan);
        let rows =
            (0..lens.len()).map(|s| (row_of[plan.rows(s).start], plan.seqs[s].id, ids[row_of[plan.rows(s).start]]));
        let mut feed = feed_runs(rows, &self.drawn)?;
        feed.sort_by_key(|r| r.row);
        let mut picked: Vec<u32> = seqs.iter().map(|&s| row_of[plan.last_row(s)] as u32).collect();
        let extra_rows = picked_extra(&mut picked, extra.iter().map(|&r| row_of[r] as u32));
        let step = DeviceStep { token_ids: &ids, meta: &meta, slot_mapping: &slots, picked: &picked };
        // Every row a decode row and picked, in order: the shape a whole-step graph replays.
        let all_decode = lens.iter().all(|&l| l == 1) && seqs.iter().copied().eq(0..lens.len());
        if !(all_decode && extra.is_empty() && self.replay_decode(&step, sampling, &feed)?) {
            self.model.launch_fed(&step, Some(&self.tokens), &feed)?;
            if !sampling.is_empty() {
                self.sample_on_device(sampling)?;
            }
        }
        self.drawn = drawn_on_device(plan, seqs, sampling);
        Ok(extra_rows)
    }

    /// After the device drew `sampled` from the first `sampling.len()` picked rows: with `rows`
    /// (picked rows `downloaded`, every row that is not [`SamplingRow::on_device`] among them),
    /// the token of each such row drawn again on the host from its raw row.
    fn redraw_on_host(
        sampling: &[SamplingRow<'_>],
        downloaded: &[usize],
        rows: &Array2<f32>,
        sampled: &mut [u32],
    ) -> Result<()> {
        // In parallel: a row's processors and sampler take 0.3 to 5 ms at Qwen3's vocabulary.
        let redrawn = downloaded
            .par_iter()
            .enumerate()
            .filter(|(_, &j)| !sampling[j].on_device())
            .map(|(k, &j)| Ok((j, sampling[j].draw(rows.row(k).as_slice().expect("logits rows are contiguous"))?)))
            .collect::<Result<Vec<(usize, u32)>>>()?;
        for (j, token) in redrawn {
            sampled[j] = token;
        }
        Ok(())
    }
}

/// Settings for a row whose token is dropped: the cheapest draw.
fn greedy() -> DeviceSamplingRow {
    DeviceSamplingRow::new(0.0, 0, 1.0, 0.0, 0, 0).expect("greedy settings are valid")
}

impl StepExecutor for GpuExecutor {
    fn execute(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], wanted: &LogitsWanted) -> Result<StepOutput> {
        if !self.in_flight.is_empty() {
            return Err(Error::Executor("a step run at once while others are in flight".into()));
        }
        let seqs = sampling_seqs(plan, sampling)?;
        let extra = self.enqueue_draws(plan, sampling, &seqs, wanted.query_rows(plan.token_ids.len())?)?;
        let mut sampled = match seqs.is_empty() {
            true => {
                self.model.faults().check()?;
                Vec::new()
            }
            false => self.finish(sampling.len())?,
        };
        // Only the rows the host reads cross: those it draws again, the scored ones and the
        // query rows asked for. The sampling rows come first among the logits rows.
        let scoring = *wanted == LogitsWanted::ScoredRows;
        let mut needed: Vec<usize> = (0..sampling.len())
            .filter(|&j| !sampling[j].on_device() || (scoring && sampling[j].scored))
            .chain(extra.iter().copied())
            .collect();
        needed.sort_unstable();
        needed.dedup();
        let rows = match needed.is_empty() {
            true => Array2::zeros((0, self.model.dims().vocab_size)),
            false => self.model.download_logit_rows(&needed)?,
        };
        let drawn_rows = needed.partition_point(|&k| k < sampling.len());
        Self::redraw_on_host(sampling, &needed[..drawn_rows], &rows, &mut sampled)?;
        let position = |k: usize| needed.binary_search(&k).expect("every row returned was downloaded");
        let logits = match wanted {
            LogitsWanted::Discard => None,
            LogitsWanted::ScoredRows => Some(scored_rows(sampling)),
            LogitsWanted::QueryRows(_) => Some(extra),
        };
        let logits = logits.map(|k| rows.select(Axis(0), &k.into_iter().map(position).collect::<Vec<_>>()));
        Ok(StepOutput { sampled, logits })
    }

    /// A step whose every row draws on the device and that wants at most its scored rows' logits
    /// is queued: its tokens, fault word and scored rows are copied into a landing of page-locked
    /// memory behind it, and [`StepExecutor::collect`] waits for those copies alone. Any other
    /// step runs at once.
    fn submit(&mut self, plan: &StepPlan, sampling: &[SamplingRow<'_>], wanted: &LogitsWanted) -> Result<Submitted> {
        let queued =
            !matches!(wanted, LogitsWanted::QueryRows(_)) && !self.measuring && sampling.iter().all(|r| r.on_device());
        if !queued {
            return Ok(Submitted::Done(self.execute(plan, sampling, wanted)?));
        }
        // Refused before anything is enqueued: a step without a landing leaves the stream alone.
        let at = self.in_flight.vacant()?;
        let seqs = sampling_seqs(plan, sampling)?;
        at.start_marks(self.marking, &self.gpu)?;
        self.enqueue_draws(plan, sampling, &seqs, &[])?;
        if let Some(marks) = self.in_flight.vacant()?.marks() {
            marks.forward(self.gpu.stream())?;
        }
        let rows = sampling.len();
        let scored = (*wanted == LogitsWanted::ScoredRows).then(|| scored_rows(sampling));
        let vocab = self.model.dims().vocab_size;
        let at = self.in_flight.vacant()?;
        self.results.enqueue(&self.tokens.slice(..rows), &mut at.tokens, self.model.faults(), &mut at.faults)?;
        let stream = self.gpu.stream();
        if let Some(scored) = &scored {
            let len = scored.len() * vocab;
            if at.logits.as_ref().is_none_or(|l| l.len() < len) {
                // The landing is held by no step in flight, so its memory is nobody's copy target.
                // Freeing the smaller area may wait for the device: once per new largest size.
                at.logits = Some(self.gpu.pinned(len)?);
            }
            let landing = at.logits.as_mut().expect("sized above").as_mut_slice().map_err(gpu::Error::from)?;
            self.model.enqueue_logit_rows(scored, &mut landing[..len])?;
        }
        at.scored = scored.map(|s| s.len());
        at.copied.record(stream).map_err(gpu::Error::from)?;
        if let Some(marks) = at.marks() {
            marks.end(stream)?;
        }
        self.in_flight.push(rows)?;
        Ok(Submitted::InFlight)
    }

    fn collect(&mut self) -> Result<StepOutput> {
        let vocab = self.model.dims().vocab_size;
        let (at, rows) = self.in_flight.pop().ok_or_else(|| Error::Executor("no step is in flight".into()))?;
        at.copied.synchronize().map_err(gpu::Error::from)?;
        if let Some(marks) = at.marks() {
            self.phases.push(marks.phases()?);
        }
        if let Some(what) = describe_faults(at.faults.as_slice()?) {
            return Err(gpu::Error::DeviceFault(what).into());
        }
        let sampled = at.tokens.as_slice()?[..rows].to_vec();
        let logits = match (at.scored, &at.logits) {
            (None, _) => None,
            (Some(0), _) => Some(Array2::zeros((0, vocab))),
            (Some(n), Some(landed)) => Some(widen_rows(landed.as_slice().map_err(gpu::Error::from)?, n, vocab)),
            (Some(n), None) => return Err(Error::Executor(format!("{n} scored rows and no landing for them"))),
        };
        Ok(StepOutput { sampled, logits })
    }

    fn kv_capacity(&self) -> KvCapacity {
        let cache = self.model.cache();
        KvCapacity { num_blocks: cache.num_blocks, block_size: cache.block_size }
    }

    fn vocab_size(&self) -> usize {
        self.model.dims().vocab_size
    }

    fn describe(&self) -> String {
        self.label.clone()
    }

    fn measure_gates(&mut self, on: bool) -> Result<bool> {
        self.model.measure_gates(on)?;
        self.measuring = on;
        Ok(true)
    }

    fn gate_counts(&mut self) -> Result<Option<(u64, u64)>> {
        Ok(self.model.gate_counts()?.map(|c| (c.zeros, c.total)))
    }

    fn start_step_trace(&mut self) -> Result<bool> {
        Ok(self.gpu.start_step_trace()?)
    }

    fn step_trace(&mut self) -> Result<Option<TraceWindow>> {
        Ok(self.gpu.step_trace()?)
    }

    fn mark_steps(&mut self, on: bool) -> Result<bool> {
        self.marking = on;
        if on {
            self.phases.clear();
        }
        Ok(true)
    }

    fn step_marks(&mut self) -> Result<Vec<StepPhases>> {
        Ok(std::mem::take(&mut self.phases))
    }

    fn even_replays(&self) -> Option<u64> {
        Some(self.even_replays)
    }
}

/// Whether this machine has a GPU the backend can open, and the error saying why not.
pub fn open_gpu() -> Result<Arc<Gpu>> {
    Gpu::new().map_err(|e| Error::Executor(format!("--device cuda: {e}")))
}
