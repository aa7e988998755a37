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
