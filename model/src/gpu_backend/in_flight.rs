//! The GPU executor's book of steps in flight: which landing (the page-locked memory a step's
//! results are copied into) each queued step holds, oldest first, and which sequences the last
//! step drew for on the device (the tokens a step planned ahead reads: [`super::pending_feed`]).
//!
//! Host bookkeeping only, so it is tested here; the copies and waits are the executor's.

use std::collections::{HashMap, VecDeque};

use crate::error::{Error, Result};
use crate::executor::SamplingRow;
use crate::scheduler::StepPlan;

/// Landings of type `T`, each held by at most one step in flight, handed out in turn and given
/// back in the order the steps were queued.
pub struct InFlightRing<T> {
    landings: Vec<T>,
    /// Each queued step's landing and its number of draws, oldest first.
    queue: VecDeque<(usize, usize)>,
    next: usize,
}

impl<T> InFlightRing<T> {
    /// A ring over `landings` (at least one).
    pub fn new(landings: Vec<T>) -> Self {
        assert!(!landings.is_empty(), "a ring needs a landing");
        Self { landings, queue: VecDeque::new(), next: 0 }
    }

    /// Whether no step is in flight.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The landing the next step takes, to copy its results into; refused while every landing
    /// holds a step in flight. Steps leave in the order they came, so the landings in use are
    /// always the ones after the last given back, and the next in turn is free.
    pub fn vacant(&mut self) -> Result<&mut T> {
        if self.queue.len() == self.landings.len() {
            return Err(Error::Executor(format!("more than {} steps in flight", self.landings.len())));
        }
        Ok(&mut self.landings[self.next])
    }

    /// Queues a step of `rows` draws in the [`InFlightRing::vacant`] landing, once its copies are
    /// enqueued (a step whose copies failed is never collected).
    pub fn push(&mut self, rows: usize) -> Result<()> {
        self.vacant()?;
        self.queue.push_back((self.next, rows));
        self.next = (self.next + 1) % self.landings.len();
        Ok(())
    }

    /// The oldest step's landing and its number of draws, taken off the queue.
    pub fn pop(&mut self) -> Option<(&T, usize)> {
        let (at, rows) = self.queue.pop_front()?;
        Some((&self.landings[at], rows))
    }
}

/// The sequences whose tokens a step drew on the device, each with its row in the sampler's
/// output: `seqs[j]` is the plan index of sampling row `j`. A row the host draws again
/// ([`SamplingRow::on_device`] false) is left out, since the device holds another token for it.
pub fn drawn_on_device(plan: &StepPlan, seqs: &[usize], sampling: &[SamplingRow<'_>]) -> HashMap<u64, usize> {
    let rows = seqs.iter().zip(sampling).enumerate().filter(|(_, (_, r))| r.on_device());
    rows.map(|(j, (&s, _))| (plan.seqs[s].id, j)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::ScheduledSeq;
    use ndarray::Array2;
    use oracle::decode::processors::{LogitsProcessors, ProcessorState};
    use oracle::decode::sampler::SamplingParams;
    use oracle::hp1::AttnMetadata;

    #[test]
    fn landings_are_held_in_turn_and_given_back_in_order() {
        let mut ring = InFlightRing::new(vec!['a', 'b']);
        assert!(ring.is_empty() && ring.pop().is_none());
        assert_eq!(*ring.vacant().unwrap(), 'a');
        assert_eq!(*ring.vacant().unwrap(), 'a', "a landing looked at is not taken");
        ring.push(3).unwrap();
        assert_eq!(*ring.vacant().unwrap(), 'b');
        ring.push(5).unwrap();
        assert!(ring.vacant().unwrap_err().to_string().contains("more than 2 steps in flight"));
        assert!(ring.push(1).is_err());
        assert_eq!(ring.pop(), Some((&'a', 3)));
        assert_eq!(*ring.vacant().unwrap(), 'a', "the landing given back is the next in turn");
        ring.push(7).unwrap();
        assert_eq!(ring.pop(), Some((&'b', 5)));
        assert_eq!(ring.pop(), Some((&'a', 7)));
        assert!(ring.is_empty());
    }

    #[test]
    fn the_draws_on_the_device_are_found_by_their_sampling_row() {
        let seq = |id, len, samples| ScheduledSeq { id, start: 0, len, samples };
        let plan = StepPlan {
            seqs: vec![seq(10, 4, false), seq(11, 1, true), seq(12, 1, true), seq(13, 2, true)],
            token_ids: vec![0; 8],
            meta: AttnMetadata {
                block_table: Array2::zeros((4, 1)),
                seq_lens: vec![4, 1, 1, 2],
                query_start_loc: vec![0, 4, 5, 6, 8],
            },
            slot_mapping: vec![0; 8],
        };
        let plain = SamplingRow::plain(SamplingParams::greedy(), 0);
        let penalised = ProcessorState::new(
            LogitsProcessors { presence_penalty: 0.5, ..LogitsProcessors::none() },
            vec![],
            &[],
            None,
        )
        .unwrap();
        let on_host = SamplingRow { processing: Some(&penalised), ..plain };
        let drawn = drawn_on_device(&plan, &[1, 2, 3], &[plain, on_host, plain]);
        assert_eq!(drawn, HashMap::from([(11, 0), (13, 2)]));
    }
}
