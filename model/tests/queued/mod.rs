//! The CPU executor, which queues plain steps as a device does, watched for the engine's tests
//! of planning ahead: how many steps were queued at once, how many rows embedded a pending token,
//! and a collect that fails as a device fault would.

#![allow(dead_code)] // each test binary uses its own subset of these helpers

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use model::block_pool::KvCapacity;
use model::executor::{LogitsWanted, SamplingRow, StepExecutor, StepOutput, Submitted};
use model::scheduler::{StepPlan, PENDING_TOKEN};
use model::Error;

/// What a test reads of a [`Queued`] executor's history.
#[derive(Default)]
pub struct QueueLog {
    /// The most steps queued at once.
    pub deepest: AtomicUsize,
    /// Rows of queued steps that embedded a pending token.
    pub pending_rows: AtomicUsize,
    /// Steps collected, the failed one included.
    pub collected: AtomicUsize,
}

pub struct Queued {
    inner: Box<dyn StepExecutor>,
    depth: usize,
    log: Arc<QueueLog>,
    /// The collect (counted from 0) that fails, its step dropped.
    fail_at: Option<usize>,
}

impl Queued {
    pub fn wrap(inner: Box<dyn StepExecutor>) -> (Self, Arc<QueueLog>) {
        let log = Arc::new(QueueLog::default());
        (Self { inner, depth: 0, log: log.clone(), fail_at: None }, log)
    }

    /// As [`Queued::wrap`], with collect number `n` failing.
    pub fn failing_at(inner: Box<dyn StepExecutor>, n: usize) -> (Self, Arc<QueueLog>) {
        let (q, log) = Self::wrap(inner);
        (Self { fail_at: Some(n), ..q }, log)
    }
}

impl StepExecutor for Queued {
    fn execute(
        &mut self,
        plan: &StepPlan,
        rows: &[SamplingRow<'_>],
        wanted: &LogitsWanted,
    ) -> model::Result<StepOutput> {
        self.inner.execute(plan, rows, wanted)
    }

    fn submit(&mut self, plan: &StepPlan, rows: &[SamplingRow<'_>], wanted: &LogitsWanted) -> model::Result<Submitted> {
        let submitted = self.inner.submit(plan, rows, wanted)?;
        if let Submitted::InFlight = submitted {
            self.depth += 1;
            self.log.deepest.fetch_max(self.depth, Ordering::Relaxed);
            let pending = plan.token_ids.iter().filter(|&&t| t == PENDING_TOKEN).count();
            self.log.pending_rows.fetch_add(pending, Ordering::Relaxed);
        }
        Ok(submitted)
    }

    fn collect(&mut self) -> model::Result<StepOutput> {
        let out = self.inner.collect();
        self.depth = self.depth.saturating_sub(1);
        if Some(self.log.collected.fetch_add(1, Ordering::Relaxed)) == self.fail_at {
            return Err(Error::Executor("an injected device fault".into()));
        }
        out
    }

    fn kv_capacity(&self) -> KvCapacity {
        self.inner.kv_capacity()
    }

    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn describe(&self) -> String {
        format!("watched {}", self.inner.describe())
    }
}
