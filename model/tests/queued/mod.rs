//! An executor that queues steps as a device does, for the engine's tests of planning ahead: a
//! step that draws plainly (no logits wanted, every row on the device) is only queued, and runs
//! when collected, in submission order; a row embedding [`PENDING_TOKEN`] gets the token the step
//! before drew for its sequence, as the GPU executor copies it on the device.

#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use model::block_pool::KvCapacity;
use model::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput, Submitted};
use model::scheduler::{StepPlan, PENDING_TOKEN};
use model::Error;
use oracle::decode::sampler::SamplingParams;

/// What a test reads of a [`Queued`] executor's history.
#[derive(Default)]
pub struct QueueLog {
    /// The most steps queued at once.
    pub deepest: AtomicUsize,
    /// Rows that embedded a pending token.
    pub pending_rows: AtomicUsize,
    /// Steps collected, the failed one included.
    pub collected: AtomicUsize,
}

pub struct Queued {
    inner: Box<dyn StepExecutor>,
    queue: VecDeque<(StepPlan, Vec<(SamplingParams, u64)>)>,
    /// The tokens the last step run drew, by request.
    drawn: HashMap<u64, u32>,
    log: Arc<QueueLog>,
    /// The collect (counted from 0) that fails, as a device fault would, dropping its step.
    fail_at: Option<usize>,
}

impl Queued {
    pub fn wrap(inner: Box<dyn StepExecutor>) -> (Self, Arc<QueueLog>) {
        let log = Arc::new(QueueLog::default());
        (Self { inner, queue: VecDeque::new(), drawn: HashMap::new(), log: log.clone(), fail_at: None }, log)
    }

    /// As [`Queued::wrap`], with collect number `n` failing.
    pub fn failing_at(inner: Box<dyn StepExecutor>, n: usize) -> (Self, Arc<QueueLog>) {
        let (q, log) = Self::wrap(inner);
        (Self { fail_at: Some(n), ..q }, log)
    }

    fn run(&mut self, mut plan: StepPlan, rows: &[SamplingRow<'_>], wanted: LogitsWanted) -> model::Result<StepOutput> {
        for (i, p) in plan.seqs.iter().enumerate() {
            let row = plan.meta.query_start_loc[i] as usize;
            if plan.token_ids[row] == PENDING_TOKEN {
                let drawn = self.drawn.get(&p.id).ok_or_else(|| {
                    Error::Executor(format!("request {}: a pending token the step before did not draw", p.id))
                })?;
                plan.token_ids[row] = *drawn;
                self.log.pending_rows.fetch_add(1, Ordering::Relaxed);
            }
        }
        if plan.token_ids.contains(&PENDING_TOKEN) {
            return Err(Error::Executor("a pending token past a sequence's first row".into()));
        }
        let out = self.inner.execute(&plan, rows, wanted)?;
        let sampling = plan.seqs.iter().filter(|p| p.samples);
        self.drawn = sampling.zip(&out.sampled).map(|(p, &t)| (p.id, t)).collect();
        Ok(out)
    }
}

impl StepExecutor for Queued {
    fn execute(
        &mut self,
        plan: &StepPlan,
        rows: &[SamplingRow<'_>],
        wanted: LogitsWanted,
    ) -> model::Result<StepOutput> {
        if !self.queue.is_empty() {
            return Err(Error::Executor("a step run at once while others are queued".into()));
        }
        self.run(plan.clone(), rows, wanted)
    }

    fn submit(&mut self, plan: &StepPlan, rows: &[SamplingRow<'_>], wanted: LogitsWanted) -> model::Result<Submitted> {
        let plain = wanted == LogitsWanted::Discard && rows.iter().all(|r| r.on_device());
        if !plain {
            return Ok(Submitted::Done(self.execute(plan, rows, wanted)?));
        }
        self.queue.push_back((plan.clone(), rows.iter().map(|r| (r.params, r.step)).collect()));
        self.log.deepest.fetch_max(self.queue.len(), Ordering::Relaxed);
        Ok(Submitted::InFlight)
    }

    fn collect(&mut self) -> model::Result<StepOutput> {
        let (plan, rows) = self.queue.pop_front().ok_or_else(|| Error::Executor("nothing queued".into()))?;
        if Some(self.log.collected.fetch_add(1, Ordering::Relaxed)) == self.fail_at {
            return Err(Error::Executor("an injected device fault".into()));
        }
        let rows: Vec<SamplingRow> = rows.into_iter().map(|(params, step)| SamplingRow::plain(params, step)).collect();
        self.run(plan, &rows, LogitsWanted::Discard)
    }

    fn kv_capacity(&self) -> KvCapacity {
        self.inner.kv_capacity()
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn describe(&self) -> String {
        format!("queued {}", self.inner.describe())
    }
}
