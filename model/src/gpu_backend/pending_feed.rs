//! Where a step planned ahead gets its pending tokens: a decode row whose token is
//! [`PENDING_TOKEN`] embeds the token the step before drew for its sequence, which is still on the
//! device (the sampler's output, in that step's sampling order) when the step is submitted. The
//! executor uploads the step's ids as planned and then copies each pending row's token over its
//! placeholder, device to device, in stream order: after the step before has drawn, before this
//! step's embedding reads it. Both steps list their sequences in running order, so the copies
//! merge into runs (one for a steady batch).
//!
//! The plan of the copies is host work, tested here; the copies are the executor's.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::scheduler::PENDING_TOKEN;

/// One device-to-device copy: `len` tokens from index `from` of the step before's draws to row
/// `row` of this step's ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeedRun {
    /// The first row of this step it writes.
    pub row: usize,
    /// The first of the step before's draws it reads.
    pub from: usize,
    /// Tokens copied.
    pub len: usize,
}

/// The copies for `rows`: each row of the step (in the order the device runs them) with the
/// sequence it belongs to and the token it embeds. `drawn` maps each sequence the step before
/// sampled to its index in that step's draws. Refuses a pending row whose sequence the step
/// before did not sample (nothing on the device holds its token).
pub fn feed_runs(
    rows: impl IntoIterator<Item = (usize, u64, u32)>,
    drawn: &HashMap<u64, usize>,
) -> Result<Vec<FeedRun>> {
    let mut runs: Vec<FeedRun> = Vec::new();
    for (row, id, token) in rows {
        if token != PENDING_TOKEN {
            continue;
        }
        let from = *drawn.get(&id).ok_or_else(|| {
            Error::Executor(format!("request {id}: a pending token that the step before did not draw"))
        })?;
        match runs.last_mut() {
            Some(r) if r.row + r.len == row && r.from + r.len == from => r.len += 1,
            _ => runs.push(FeedRun { row, from, len: 1 }),
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u32 = PENDING_TOKEN;

    fn drawn(ids: &[u64]) -> HashMap<u64, usize> {
        ids.iter().enumerate().map(|(j, &id)| (id, j)).collect()
    }

    #[test]
    fn a_steady_batch_is_one_run() {
        let rows = (0..4).map(|r| (r, 10 + r as u64, P));
        assert_eq!(feed_runs(rows, &drawn(&[10, 11, 12, 13])).unwrap(), [FeedRun { row: 0, from: 0, len: 4 }]);
    }

    #[test]
    fn a_finished_sequence_and_known_tokens_split_the_runs() {
        // 11 finished after the step before; 20 joins with a known token; 13 drew second to last.
        let rows = [(0, 10, P), (1, 12, P), (2, 13, P), (3, 20, 7)];
        let runs = feed_runs(rows, &drawn(&[10, 11, 12, 13])).unwrap();
        assert_eq!(runs, [FeedRun { row: 0, from: 0, len: 1 }, FeedRun { row: 1, from: 2, len: 2 }]);
        assert!(feed_runs([(0, 5, 9), (1, 6, 9)], &HashMap::new()).unwrap().is_empty());
    }

    #[test]
    fn a_pending_row_the_step_before_did_not_draw_is_refused() {
        let err = feed_runs([(0, 10, P), (1, 30, P)], &drawn(&[10])).unwrap_err().to_string();
        assert!(err.contains("request 30"), "{err}");
    }
}
