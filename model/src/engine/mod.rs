//! The engine loop shared by every backend: admit requests, plan a step, run and sample it on the
//! executor, detokenise, stop, free; and abort a request on demand.
//!
//! Determinism: a request's tokens depend only on its prompt, its parameters and the model, never
//! on its batch neighbours or on preemptions. The scheduler cuts every sequence at fixed chunk
//! boundaries from its start, each row of the forward is computed independently of the others,
//! and the sampler's randomness is keyed by (seed, step, token id) with `step` the request's own
//! count of generated tokens, which a preemption keeps (only the KV cache is recomputed, and the
//! recomputation samples nothing until it reaches the last known token). A prefix-cache hit
//! changes no bit either: it skips only whole chunks whose K/V an uncached run computes the same
//! way (the rule is in the scheduler's `prefix` module).
//!
//! Prefix caching skips prompt positions, whose logits rows then never exist. So while the
//! engine records logits ([`Engine::new`]'s `record_logits`) it looks nothing up, and every
//! recorded row is there; a single request opts out with
//! [`GenerationRequest::skip_prefix_cache`] (a request that needs every prompt position's
//! logits, such as `echo` with `logprobs`).
//!
//! Over an executor that queues steps on a device, the engine plans and submits each step before
//! it waits for the one in flight (the scheduler's `ahead` module), so the device never waits for
//! the host's planning and hand-out; a decode row then embeds a token still being drawn, which the
//! executor reads on the device. Only requests whose tokens are drawn on the device and whose
//! prompt's logits nobody reads allow it (the logprobs of their tokens come back with the tokens,
//! from the scored rows alone). A request ended by a token learnt late (a stop string, an abort)
//! has one more row computed and its draw dropped, so its tokens are the same bits either way.
//!
//! The scheduler's block pool is sized from [`StepExecutor::kv_capacity`], so the executor's cache
//! and the scheduler's pool always agree. [`Engine::abort`] drops a request (a client that went
//! away) with no completion, since [`FinishReason`] names only the ways a request ends by itself.
//! The request types are re-exported here so that callers need not reach into `oracle`.
//!
//! Each request samples by SPEC 5's whole order: its logits processors ([`LogitsProcessors`])
//! over its own prompt and output, then the draw. Logprobs are the raw row's log-softmax: those of
//! each generated token come with its [`EngineEvent::Token`], those of the prompt (OpenAI's
//! `echo`) as one [`EngineEvent::PromptLogprobs`] just before the first token. The prompt's come
//! from the logits of every prompt position, the rows `--dump-logits` records; a request asking
//! for them must compute every prompt position ([`GenerationRequest::needs_prompt_logits`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ndarray::Array2;
use oracle::decode::byte_table::ByteTable;
pub use oracle::decode::logprobs::TokenLogprobs;
pub use oracle::decode::processors::LogitsProcessors;
use oracle::decode::processors::ProcessorState;
use oracle::decode::request::RequestDecoder;
pub use oracle::decode::sampler::SamplingParams;
pub use oracle::decode::stop::{FinishReason, StopConditions};
use rayon::prelude::*;
use tokenizers::Tokenizer;

use crate::error::{Error, Result};
use crate::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput, Submitted};
use crate::request_state::RequestState;
use crate::scheduler::{ScheduledSeq, Scheduler, SchedulerConfig, StepPlan};

mod request;
mod stats;

pub use request::{keep_last_tokens, Completion, EngineEvent, GenerationRequest};
pub use stats::{EngineStats, StepRows, StepTimes};

/// Scheduler, detokeniser and stop rules over a [`StepExecutor`], which runs and samples each step.
pub struct Engine {
    executor: Box<dyn StepExecutor>,
    tokenizer: Arc<Tokenizer>,
    scheduler: Scheduler,
    active: BTreeMap<u64, RequestState>,
    finished: Vec<Completion>,
    next_id: u64,
    record_logits: bool,
    /// Whether steps are planned ahead of the draws in flight ([`Engine::set_pipelining`]).
    pipelining: bool,
    /// The steps the executor is running, oldest first (two at most: the one handed out next and
    /// the one planned ahead of its draws), each submitted and committed ahead.
    in_flight: VecDeque<Step>,
    last_step: StepRows,
    last_times: StepTimes,
}

/// A submitted step: its plan and what was asked of it.
struct Step {
    plan: StepPlan,
    wanted: LogitsWanted,
    shape: StepRows,
    /// Whether each sampling sequence's logits row comes back ([`SamplingRow::scored`]), in
    /// sampling order: one token each to hand back.
    scored: Vec<bool>,
}

/// What [`Engine::launch`] did.
enum Launched {
    /// Nothing was left to plan.
    Nothing,
    /// The step ran at once.
    Ran(Box<(Step, StepOutput)>),
    /// The step is in flight (the last of [`Engine::in_flight`]).
    Queued,
}

impl Engine {
    /// An idle engine whose scheduler manages the executor's KV cache. With `record_logits`, every
    /// logits row is computed and kept per request (no request reuses cached prefix blocks).
    pub fn new(
        executor: Box<dyn StepExecutor>,
        tokenizer: Arc<Tokenizer>,
        scheduler: SchedulerConfig,
        record_logits: bool,
    ) -> Result<Self> {
        let kv = executor.kv_capacity();
        // Off the engine's thread: the first admitted request would otherwise build it, and a
        // step would wait for it. A failed spawn leaves it to that request.
        let warm = tokenizer.clone();
        let _ = std::thread::Builder::new()
            .name("detok-prepare".into())
            .spawn(move || oracle::decode::IncrementalDetokenizer::prepare(&warm));
        Ok(Self {
            executor,
            tokenizer,
            scheduler: Scheduler::new(scheduler, kv)?,
            active: BTreeMap::new(),
            finished: Vec::new(),
            next_id: 0,
            record_logits,
            pipelining: true,
            in_flight: VecDeque::new(),
            last_step: StepRows::default(),
            last_times: StepTimes::default(),
        })
    }

    /// Validates and queues a request; returns its id.
    pub fn add_request(&mut self, req: GenerationRequest) -> Result<u64> {
        req.sampling.validate()?;
        let vocab = self.executor.vocab_size();
        req.processors.validate(vocab)?;
        if let Some(&bad) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::Invalid {
                param: "prompt",
                reason: format!("token id {bad} is outside the vocabulary of {vocab}"),
            });
        }
        if let Some(&bad) = req.stop.stop_token_ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(Error::Invalid {
                param: "stop_token_ids",
                reason: format!("token ids must be < {vocab}, got {bad}"),
            });
        }
        if req.processors.min_tokens > req.stop.max_tokens {
            return Err(Error::Invalid {
                param: "min_tokens",
                reason: format!("must be <= max_tokens = {}, got {}", req.stop.max_tokens, req.processors.min_tokens),
            });
        }
        let decoder = RequestDecoder::new(self.tokenizer.clone(), req.stop.clone(), req.prompt.len())?;
        let processing = match req.processors.is_none() {
            true => None,
            false => {
                let ends = req.stop.eos_token_ids.iter().chain(&req.stop.stop_token_ids).copied().collect();
                let table = req.processors.guide.as_ref().and_then(|_| ByteTable::shared(&self.tokenizer));
                Some(ProcessorState::new(req.processors.clone(), ends, &req.prompt, table)?)
            }
        };
        let id = self.next_id;
        if req.skip_prefix_cache || req.needs_prompt_logits() || self.record_logits {
            self.scheduler.add_uncached(id, req.prompt.clone(), req.stop.max_tokens)?;
        } else {
            self.scheduler.add(id, req.prompt.clone(), req.stop.max_tokens)?;
        }
        self.next_id += 1;
        let state = RequestState {
            prompt: req.prompt,
            sampling: req.sampling,
            processing,
            decoder,
            logprobs: req.logprobs,
            prompt_logprobs: req.prompt_logprobs,
            token_logprobs: Vec::new(),
            prompt_record: Vec::new(),
            prompt_sent: false,
            logits: Vec::new(),
            draws_in_flight: 0,
        };
        self.active.insert(id, state);
        Ok(id)
    }

    /// Whether any request is unfinished or a step is still in flight (one more [`Engine::step`]
    /// hands it out).
    pub fn has_work(&self) -> bool {
        self.scheduler.has_work() || !self.in_flight.is_empty()
    }

    /// Turns planning ahead of the draws in flight on (the default) or off. Off, or over an
    /// executor that runs each step at once, every step is planned after the one before has
    /// drawn. The tokens are the same bits either way; only the host's gaps between steps differ.
    pub fn set_pipelining(&mut self, on: bool) {
        self.pipelining = on;
    }

    /// Runs one step; returns what happened, in query order. Over an executor that queues steps
    /// ([`Submitted::InFlight`]) the engine plans and submits the next step before it waits for
    /// this one, when every request draws plainly ([`Engine::set_pipelining`]): the events are
    /// then the step before's, and the device goes from step to step with no host gap.
    ///
    /// A failed step leaves the engine usable: the steps still queued are collected and dropped,
    /// and the requests they were drawing for end with no completion (as [`Engine::abort`]), since
    /// their tokens can no longer be known; every other request runs on.
    pub fn step(&mut self) -> Result<Vec<EngineEvent>> {
        self.last_step = StepRows::default();
        self.last_times = StepTimes::default();
        self.pipelined_step().inspect_err(|_| self.abandon_in_flight())
    }

    fn pipelined_step(&mut self) -> Result<Vec<EngineEvent>> {
        if self.in_flight.is_empty() {
            match self.launch(false)? {
                Launched::Nothing => return Ok(Vec::new()),
                Launched::Ran(ran) => return self.hand_out(ran.0, ran.1, false),
                Launched::Queued => {}
            }
        }
        if self.plans_ahead() {
            if let Launched::Ran(_) = self.launch(true)? {
                return Err(Error::Executor("a step ran to the end while another was in flight".into()));
            }
        }
        self.collect()
    }

    /// Waits for the oldest step in flight and hands it out.
    fn collect(&mut self) -> Result<Vec<EngineEvent>> {
        // Out of the queue first: a failure leaves queued exactly what the executor still holds.
        let step = self.in_flight.pop_front().expect("a step is in flight");
        let waiting = Instant::now();
        let out = self.executor.collect()?;
        self.last_times.execute += waiting.elapsed();
        self.hand_out(step, out, true)
    }

    /// After a failed step: collects and drops what the executor still queues, and ends the
    /// requests whose draws are in flight.
    fn abandon_in_flight(&mut self) {
        for _ in self.in_flight.drain(..) {
            let _ = self.executor.collect();
        }
        let drawing: Vec<u64> = self.active.iter().filter(|(_, a)| a.draws_in_flight > 0).map(|(&id, _)| id).collect();
        for id in drawing {
            self.active.remove(&id);
            let _ = self.scheduler.finish(id);
        }
    }

    /// Hands out the step in flight, if any, and submits none: afterwards the executor has no
    /// work queued, as before a change to how it runs steps (a benchmark's gate count).
    pub fn settle(&mut self) -> Result<Vec<EngineEvent>> {
        self.last_times = StepTimes::default();
        let mut events = Vec::new();
        while !self.in_flight.is_empty() {
            match self.collect() {
                Ok(more) => events.extend(more),
                Err(e) => {
                    self.abandon_in_flight();
                    return Err(e);
                }
            }
        }
        Ok(events)
    }

    /// Whether the next step may be planned before the one in flight has drawn: only while no
    /// request needs its tokens drawn on the host or its prompt's logits, nor logits are recorded
    /// (the step planned ahead reads its pending tokens on the device).
    fn plans_ahead(&self) -> bool {
        self.pipelining && !self.record_logits && self.active.values().all(RequestState::draws_plainly)
    }

    /// Plans the next step and submits it; `ahead` while another step is in flight (then a step
    /// with nothing to plan is no error: the one in flight may finish every request).
    fn launch(&mut self, ahead: bool) -> Result<Launched> {
        let scheduling = Instant::now();
        let Some(plan) = self.scheduler.schedule()? else {
            if self.scheduler.has_work() && !ahead {
                return Err(Error::Scheduler("requests are waiting but none can be scheduled".into()));
            }
            if ahead {
                self.last_times.schedule += scheduling.elapsed();
            }
            return Ok(Launched::Nothing);
        };
        // One walk over the plan, one lookup of each sequence's state: at 128 sequences the
        // map's lookups were a seventh of the engine's host time (host_step under perf).
        let mut rows: Vec<SamplingRow> = Vec::with_capacity(plan.seqs.len());
        // Each sequence's query rows that come back should any prompt's rows be wanted: all of
        // them where its prompt's logprobs are recorded, its last where its token is scored.
        let mut query_rows: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut prompt_rows, mut token_rows, mut num_decodes) = (self.record_logits, false, 0);
        for (i, p) in plan.seqs.iter().enumerate() {
            let active = &self.active[&p.id];
            let scored = p.samples && active.sampling_row().scored;
            if self.record_logits || active.wants_prompt_rows(p.start, p.len) {
                prompt_rows = true;
                query_rows.push(plan.rows(i));
            } else if scored {
                query_rows.push(plan.last_row(i)..plan.last_row(i) + 1);
            }
            if p.samples {
                let row = active.sampling_row();
                token_rows |= row.scored;
                rows.push(row);
            }
            num_decodes += usize::from(p.len == 1);
        }
        let shape = StepRows { num_seqs: plan.seqs.len(), num_tokens: plan.token_ids.len(), num_decodes };
        let wanted = match (prompt_rows, token_rows) {
            (true, _) => LogitsWanted::QueryRows(query_rows.into_iter().flatten().collect()),
            (false, true) => LogitsWanted::ScoredRows,
            (false, false) => LogitsWanted::Discard,
        };
        let executing = Instant::now();
        self.last_times.schedule += executing - scheduling;
        let submitted = self.executor.submit(&plan, &rows, &wanted)?;
        let submitting = executing.elapsed();
        self.last_times.submit += submitting;
        self.last_times.execute += submitting;
        let scored = rows.iter().map(|r| r.scored).collect();
        drop(rows);
        let step = Step { plan, wanted, shape, scored };
        match submitted {
            Submitted::Done(out) => Ok(Launched::Ran(Box::new((step, out)))),
            Submitted::InFlight => {
                // Tracked before anything can fail, so that a failure collects it.
                for p in step.plan.seqs.iter().filter(|p| p.samples) {
                    self.active.get_mut(&p.id).expect("a planned request is active").draws_in_flight += 1;
                }
                self.in_flight.push_back(step);
                let step = self.in_flight.back().expect("just queued");
                self.scheduler.commit_ahead(&step.plan)?;
                Ok(Launched::Queued)
            }
        }
    }

    /// Hands out the tokens `out` drew for `step`: logprobs, text, stop rules, the scheduler's
    /// record of them (a commit, or a resolve of a step committed `ahead`), and the finished
    /// requests. A request finished or aborted after `step` was planned has its token dropped.
    fn hand_out(&mut self, step: Step, out: StepOutput, ahead: bool) -> Result<Vec<EngineEvent>> {
        let handing_out = Instant::now();
        let Step { plan, wanted, shape, scored } = step;
        self.last_step = shape;
        if out.sampled.len() != scored.len() {
            return Err(Error::Executor(format!("asked for {} tokens, got {}", scored.len(), out.sampled.len())));
        }
        let vocab = self.executor.vocab_size();
        let query_rows = wanted.query_rows(plan.token_ids.len())?;
        let expected_rows = match wanted {
            LogitsWanted::QueryRows(_) => query_rows.len(),
            LogitsWanted::ScoredRows => scored.iter().filter(|&&s| s).count(),
            LogitsWanted::Discard => 0,
        };
        let logits = out.logits.as_ref().filter(|l| l.dim() == (expected_rows, vocab));
        if wanted != LogitsWanted::Discard && logits.is_none() {
            return Err(Error::Executor(format!("expected [{expected_rows}, {vocab}] logits")));
        }
        // Plan row `r`'s logits row under `QueryRows`.
        let query_row = |r: usize| query_rows.binary_search(&r).ok();
        if let LogitsWanted::QueryRows(_) = wanted {
            let logits = logits.expect("checked above");
            self.record_prompt_logprobs(&plan, logits, query_row);
            if self.record_logits {
                self.record(&plan, logits);
            }
        }
        let mut drawn = out.sampled.iter().copied();
        let sampled: Vec<Option<u32>> = plan.seqs.iter().map(|p| p.samples.then(|| drawn.next()).flatten()).collect();
        if ahead {
            // Resolved before anything can fail: a failure then ends only the requests of the
            // steps still in flight.
            self.scheduler.resolve(&plan, &sampled)?;
            for p in plan.seqs.iter().filter(|p| p.samples) {
                if let Some(active) = self.active.get_mut(&p.id) {
                    active.draws_in_flight -= 1;
                }
            }
        }
        let mut events = Vec::new();
        let mut done = Vec::new();
        // Sampling row j's logits row under `ScoredRows`: the scored rows come back alone.
        let mut scored_before = 0;
        let scored_row: Vec<Option<usize>> = scored
            .iter()
            .map(|&s| {
                scored_before += usize::from(s);
                s.then(|| scored_before - 1)
            })
            .collect();
        let drawing: Vec<(usize, &ScheduledSeq, u32)> =
            plan.seqs.iter().zip(&sampled).enumerate().filter_map(|(i, (p, t))| Some((i, p, (*t)?))).collect();
        // The tokens' log-softmaxes, in parallel: 0.7 ms a row of Qwen3's vocabulary on one core.
        let scores: Vec<Option<TokenLogprobs>> = match logits {
            None => vec![None; drawing.len()],
            Some(l) => drawing
                .par_iter()
                .enumerate()
                .map(|(j, &(i, p, token))| {
                    let row = match wanted {
                        LogitsWanted::QueryRows(_) => query_row(plan.last_row(i)),
                        _ => scored_row[j],
                    };
                    let row = row.map(|k| l.row(k));
                    self.active.get(&p.id)?.score(token, row)
                })
                .collect(),
        };
        for ((_, p, token), logprobs) in drawing.into_iter().zip(scores) {
            let Some(active) = self.active.get_mut(&p.id) else { continue };
            if let Some(prompt) = active.take_prompt_logprobs() {
                events.push(EngineEvent::PromptLogprobs { request: p.id, logprobs: prompt });
            }
            active.push_sampled(token, logprobs.as_ref());
            let emitted = active.decoder.push(token)?;
            events.push(EngineEvent::Token { request: p.id, token, text: emitted.text, logprobs });
            if let Some(reason) = emitted.finish {
                events.push(EngineEvent::Finished { request: p.id, reason });
                done.push(p.id);
            }
        }
        if !ahead {
            self.scheduler.commit(&plan, &sampled)?;
        }
        for id in done {
            self.scheduler.finish(id)?;
            self.retire(id);
        }
        self.last_times.hand_out = handing_out.elapsed();
        Ok(events)
    }

    /// Records, for each sequence that asked, the prompt logprobs this step's rows give:
    /// `logits` holds the rows `query_row` finds, each sequence's all or none but its last.
    fn record_prompt_logprobs(
        &mut self,
        plan: &StepPlan,
        logits: &Array2<f32>,
        query_row: impl Fn(usize) -> Option<usize>,
    ) {
        for (i, p) in plan.seqs.iter().enumerate() {
            // A sequence's first row came back only with all its rows, which follow in order.
            let Some(first) = query_row(plan.rows(i).start) else { continue };
            let active = self.active.get_mut(&p.id).expect("every scheduled request is active");
            active.record_prompt_rows(p.start, p.len, |pos| logits.row(first + pos - p.start));
        }
    }

    /// Keeps each sequence's rows of `logits` (every query row of the step, as recording asks)
    /// that it has not recorded yet (a recomputation after a preemption starts again at position
    /// 0).
    fn record(&mut self, plan: &StepPlan, logits: &Array2<f32>) {
        let vocab = self.executor.vocab_size();
        for (i, p) in plan.seqs.iter().enumerate() {
            let active = self.active.get_mut(&p.id).expect("every scheduled request is active");
            let recorded = active.logits.len() / vocab;
            let first_row = plan.rows(i).start;
            for pos in recorded.max(p.start)..p.start + p.len {
                active.logits.extend(logits.row(first_row + pos - p.start).iter());
            }
        }
    }

    /// Turns the recording of logits rows (as `record_logits` in [`Engine::new`]) on or off, so a
    /// caller that wants logits for some batches only (the Python bindings' logprobs) does not
    /// pay for them on every other. Refused while any request is unfinished, since its rows
    /// would be half recorded.
    pub fn set_record_logits(&mut self, record: bool) -> Result<()> {
        if !self.active.is_empty() {
            return Err(Error::Request(format!(
                "logits recording can change only while the engine is idle, but {} requests are unfinished",
                self.active.len()
            )));
        }
        self.record_logits = record;
        Ok(())
    }

    /// Removes a running or waiting request at once, freeing its KV-cache blocks; it produces no
    /// further events and no [`Completion`] (a draw of it in a step in flight is dropped; the
    /// device runs that step before any later one that takes its blocks). Refuses an id that is
    /// not running or waiting.
    pub fn abort(&mut self, id: u64) -> Result<()> {
        if self.active.remove(&id).is_none() {
            return Err(Error::UnknownRequest { id });
        }
        self.scheduler.finish(id)
    }

    fn retire(&mut self, id: u64) {
        let a = self.active.remove(&id).expect("finished request was active");
        let vocab = self.executor.vocab_size();
        let logits = self.record_logits.then(|| {
            let rows = a.logits.len() / vocab;
            Array2::from_shape_vec((rows, vocab), a.logits).expect("whole rows were recorded")
        });
        self.finished.push(Completion {
            id,
            prompt_tokens: a.prompt.len(),
            token_ids: a.decoder.token_ids().to_vec(),
            text: a.decoder.text().to_string(),
            finish: a.decoder.finish_reason().cloned().expect("retired requests have finished"),
            logprobs: a.logprobs.map(|_| a.token_logprobs),
            prompt_logprobs: a.prompt_logprobs.map(|_| a.prompt_record),
            logits,
        });
    }

    /// Steps until every request has finished; returns the completions in id order.
    pub fn run_to_completion(&mut self) -> Result<Vec<Completion>> {
        while self.has_work() {
            self.step()?;
        }
        Ok(self.take_finished())
    }

    /// The completions of requests finished since the last call, in id order. A caller that
    /// steps the engine itself and reads its events must still call this now and then, or the
    /// completions pile up for as long as the engine lives.
    pub fn take_finished(&mut self) -> Vec<Completion> {
        let mut done = std::mem::take(&mut self.finished);
        done.sort_by_key(|c| c.id);
        done
    }

    /// Requests, blocks, preemptions and prefix-cache counts now.
    pub fn stats(&self) -> EngineStats {
        let pool = self.scheduler.pool();
        EngineStats {
            num_running: self.scheduler.num_running(),
            num_waiting: self.scheduler.num_waiting(),
            num_blocks_used: pool.num_used(),
            num_blocks: pool.num_blocks(),
            num_preemptions: self.scheduler.num_preemptions(),
            prefix_cache_queries: self.scheduler.prefix_cache_queries(),
            prefix_cache_hits: self.scheduler.prefix_cache_hits(),
        }
    }

    /// The shape of the last [`Engine::step`] (all zero when it ran nothing), for a benchmark
    /// that times decode steps apart from prefill and mixed ones.
    pub fn last_step(&self) -> StepRows {
        self.last_step
    }

    /// Where the last [`Engine::step`]'s time went (all zero when it ran nothing), for a
    /// benchmark that shows the host's own work apart from the executor's.
    pub fn last_step_times(&self) -> StepTimes {
        self.last_times
    }

    /// The scheduler, for its limits and its pool's invariant checks.
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// The executor's description.
    pub fn describe(&self) -> String {
        self.executor.describe()
    }

    /// The executor, for measurements beside the steps (a benchmark's gate statistics);
    /// [`Engine::settle`] first, since a step in flight runs as it was submitted.
    pub fn executor_mut(&mut self) -> &mut dyn StepExecutor {
        self.executor.as_mut()
    }
}
