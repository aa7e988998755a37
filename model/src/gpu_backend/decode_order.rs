//! A step's sequences in the order the GPU forward wants them: its decode sequences first (they
//! run on the decode kernels, never in a tensor-core launch with a neighbour's chunk), the
//! scheduler's order kept within each class, and each plan row's row in the reordered step so
//! the logits map back. Host work only, tested here; the executor uploads the result.

use ndarray::Array2;
use oracle::hp1::AttnMetadata;

use crate::scheduler::StepPlan;

/// A step's ids, metadata and slots in another sequence order, and for each plan row its row there.
pub(super) type Reordered = (Vec<u32>, AttnMetadata, Vec<i64>, Vec<usize>);

/// Each sequence's query length, and `plan` [`reordered`] with its decode sequences first (the
/// order the forward wants, keeping the scheduler's order within each class).
pub(super) fn decodes_first(plan: &StepPlan) -> (Vec<i32>, Reordered) {
    let lens: Vec<i32> = plan.meta.query_start_loc.windows(2).map(|w| w[1] - w[0]).collect();
    let order: Vec<usize> =
        (0..lens.len()).filter(|&s| lens[s] == 1).chain((0..lens.len()).filter(|&s| lens[s] != 1)).collect();
    let step = reordered(plan, &order);
    (lens, step)
}

/// `plan` with its sequences in `order`: ids, metadata and slots rebuilt, rows moved with their
/// sequences. Returns the step and, for each plan row, its row in the reordered step.
fn reordered(plan: &StepPlan, order: &[usize]) -> Reordered {
    let meta = &plan.meta;
    let qsl = &meta.query_start_loc;
    let mut table = Array2::<i32>::zeros(meta.block_table.dim());
    let (mut ids, mut slots, mut seq_lens, mut starts) = (Vec::new(), Vec::new(), Vec::new(), vec![0i32]);
    let mut row_of = vec![0usize; plan.token_ids.len()];
    for (i, &s) in order.iter().enumerate() {
        table.row_mut(i).assign(&meta.block_table.row(s));
        let (a, b) = (qsl[s] as usize, qsl[s + 1] as usize);
        for (k, r) in (a..b).enumerate() {
            row_of[r] = ids.len() + k;
        }
        ids.extend_from_slice(&plan.token_ids[a..b]);
        slots.extend_from_slice(&plan.slot_mapping[a..b]);
        seq_lens.push(meta.seq_lens[s]);
        starts.push(starts[i] + (b - a) as i32);
    }
    (ids, AttnMetadata { block_table: table, seq_lens, query_start_loc: starts }, slots, row_of)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::ScheduledSeq;

    #[test]
    fn reordering_moves_rows_with_their_sequences() {
        let seq = |id, len| ScheduledSeq { id, start: 0, len, samples: true };
        let plan = StepPlan {
            seqs: vec![seq(0, 3), seq(1, 1), seq(2, 2), seq(3, 1)],
            token_ids: vec![10, 11, 12, 20, 30, 31, 40],
            meta: AttnMetadata {
                block_table: Array2::from_shape_fn((4, 2), |(s, j)| (s * 2 + j) as i32),
                seq_lens: vec![3, 9, 2, 5],
                query_start_loc: vec![0, 3, 4, 6, 7],
            },
            slot_mapping: vec![100, 101, 102, 200, 300, 301, 400],
        };
        let (ids, meta, slots, row_of) = reordered(&plan, &[1, 3, 0, 2]);
        assert_eq!(ids, vec![20, 40, 10, 11, 12, 30, 31]);
        assert_eq!(slots, vec![200, 400, 100, 101, 102, 300, 301]);
        assert_eq!(meta.seq_lens, vec![9, 5, 3, 2]);
        assert_eq!(meta.query_start_loc, vec![0, 1, 2, 5, 7]);
        assert_eq!(meta.block_table.row(0).to_vec(), vec![2, 3]);
        assert_eq!(row_of, vec![2, 3, 4, 0, 5, 6, 1]);
        for (r, &moved) in row_of.iter().enumerate() {
            assert_eq!(plan.token_ids[r], ids[moved]);
        }
    }
}
