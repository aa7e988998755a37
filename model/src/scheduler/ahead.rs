//! Planning a step before the step in flight has drawn its tokens, so that the host's planning
//! and hand-out run while the device computes (vLLM's asynchronous scheduling).
//!
//! A step submitted to a device that queues it is committed at once with
//! [`Scheduler::commit_ahead`]: its chunks count as computed and each sampling sequence gets a
//! [`PENDING_TOKEN`] where its drawn token will be. The next step can then be planned as usual: a
//! decode row of such a sequence embeds `PENDING_TOKEN`, which the executor replaces on the device
//! by the token the step before drew for that sequence. Once those tokens are on the host,
//! [`Scheduler::resolve`] writes them over the placeholders, whatever became of the sequences
//! meanwhile (still running, preempted, or gone).
//!
//! Three rules keep this exact:
//! - A sequence is pending at most one token when a step is planned (the step in flight draws
//!   it), and the planned step can only embed it as a decode row: generated tokens are never
//!   part of a prefill chunk or a cached block, so no placeholder reaches the prefix index.
//! - A sequence whose next draw would pass its longest length is not planned (`schedule` skips
//!   it): its last token is still being drawn, and the engine finishes it when that token comes.
//! - A preempted sequence is not readmitted while a token of it is pending (`admit` waits), so a
//!   recomputation embeds only known tokens.
//!
//! A sequence the engine finishes because of a token it learns late (a stop string, an abort)
//! may already sit in the next step: that row is computed and its draw dropped. Freeing its
//! blocks before that step has run is safe because the device runs steps in order: a block given
//! to another sequence is written by a later step before that sequence reads it.

use super::{ScheduledSeq, Scheduler, StepPlan};
use crate::error::{Error, Result};

/// The id of a token being drawn by the step in flight (no vocabulary reaches it).
pub const PENDING_TOKEN: u32 = u32::MAX;

impl Scheduler {
    /// Records that `plan` was submitted and will run: as [`Scheduler::commit`], with each
    /// sampling sequence's token pending until [`Scheduler::resolve`].
    pub fn commit_ahead(&mut self, plan: &StepPlan) -> Result<()> {
        let pending: Vec<Option<u32>> = plan.seqs.iter().map(|p| p.samples.then_some(PENDING_TOKEN)).collect();
        self.commit(plan, &pending)
    }

    /// Writes the tokens `plan` drew (`sampled[i]` for `plan.seqs[i]`, `None` where it did not
    /// sample) over the placeholders [`Scheduler::commit_ahead`] left, for every sequence still
    /// running or waiting; a finished one is skipped. Refuses a position that holds no
    /// placeholder (a plan resolved twice, or never committed ahead) and a pending draw.
    pub fn resolve(&mut self, plan: &StepPlan, sampled: &[Option<u32>]) -> Result<()> {
        if sampled.len() != plan.seqs.len() {
            return Err(Error::Scheduler(format!("{} tokens for a plan of {}", sampled.len(), plan.seqs.len())));
        }
        let running = self.running_indices(&plan.seqs);
        for ((p, tok), j) in plan.seqs.iter().zip(sampled).zip(running) {
            let Some(t) = *tok else { continue };
            let tokens = match j {
                Some(j) => &mut self.running[j].tokens,
                None => match self.waiting.iter_mut().find(|s| s.id == p.id) {
                    Some(s) => &mut s.tokens,
                    None => continue,
                },
            };
            Self::fill(tokens, p, t)?;
        }
        Ok(())
    }

    fn fill(tokens: &mut [u32], p: &ScheduledSeq, t: u32) -> Result<()> {
        let at = p.start + p.len;
        match tokens.get_mut(at) {
            Some(slot) if *slot == PENDING_TOKEN && t != PENDING_TOKEN => {
                *slot = t;
                Ok(())
            }
            _ => Err(Error::Scheduler(format!("request {}: no pending token at {at} for {t}", p.id))),
        }
    }
}
