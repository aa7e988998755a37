//! What one batch step hands the forward: its tokens, their attention metadata and cache slots,
//! and which rows get logits. A leaf of the model: the forward runs it and `validate` checks it,
//! and neither needs the other for its type.

/// Which rows of the step get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitRows<'a> {
    /// Every query row: `[num_tokens, vocab]`.
    All,
    /// The last query row of each sequence (what sampling needs): `[num_seqs, vocab]`.
    LastPerSeq,
    /// The query rows listed, ascending: `[rows, vocab]` in that order.
    Listed(&'a [usize]),
}

/// One batch step.
#[derive(Clone, Copy, Debug)]
pub struct StepInput<'a> {
    /// `[num_tokens]` token ids, in `query_start_loc` order.
    pub token_ids: &'a [u32],
    /// Block table, sequence lengths after this step, query offsets; positions come from here.
    pub meta: &'a crate::hp1::AttnMetadata,
    /// `[num_tokens]` cache slot of each new token, `block * block_size + offset`; it must agree
    /// with the block table.
    pub slot_mapping: &'a [i64],
    /// Which rows get logits.
    pub logits: LogitRows<'a>,
}

impl StepInput<'_> {
    /// The query rows that get logits, in the order their logits come out.
    pub fn logit_rows(&self) -> Vec<usize> {
        match self.logits {
            LogitRows::All => (0..self.token_ids.len()).collect(),
            LogitRows::LastPerSeq => self.meta.query_start_loc[1..].iter().map(|&end| end as usize - 1).collect(),
            LogitRows::Listed(listed) => listed.to_vec(),
        }
    }
}

/// Whether `rows` ascend strictly and all lie below `num_tokens`: what a list of a step's query
/// rows must be ([`LogitRows::Listed`], and any other list of rows of a step).
pub fn ascending_below(rows: &[usize], num_tokens: usize) -> bool {
    rows.windows(2).all(|w| w[0] < w[1]) && rows.last().is_none_or(|&r| r < num_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hp1::AttnMetadata;

    #[test]
    fn each_setting_picks_its_rows() {
        let meta = AttnMetadata {
            block_table: ndarray::Array2::zeros((2, 1)),
            seq_lens: vec![3, 2],
            query_start_loc: vec![0, 3, 5],
        };
        let step = |logits| StepInput { token_ids: &[1, 2, 3, 4, 5], meta: &meta, slot_mapping: &[0; 5], logits };
        assert_eq!(step(LogitRows::All).logit_rows(), vec![0, 1, 2, 3, 4]);
        assert_eq!(step(LogitRows::LastPerSeq).logit_rows(), vec![2, 4]);
        assert_eq!(step(LogitRows::Listed(&[1, 3])).logit_rows(), vec![1, 3]);
    }

    #[test]
    fn listed_rows_ascend_strictly_below_the_step() {
        assert!(ascending_below(&[], 0) && ascending_below(&[0, 2, 4], 5));
        assert!(!ascending_below(&[0, 5], 5) && !ascending_below(&[2, 2], 5) && !ascending_below(&[3, 1], 5));
    }
}
