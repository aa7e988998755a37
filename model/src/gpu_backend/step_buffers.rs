//! The device buffers of one forward step, allocated once at the model's capacity (the most
//! query rows, sequences and block-table columns a step may bring), and the step's host-side
//! metadata: positions, the split of its sequences into decode rows and prefill chunks, and the
//! rows that get logits.
//!
//! Every activation is bf16 `[rows, width]`; each layer reads and writes the same buffers, so the
//! step's memory does not grow with the layer count. The residual stream ping-pongs between
//! `x` and `x_next` because the fused Peri-LN kernel reads one while writing the other.
//!
//! Their sizes are known before anything is allocated ([`step_memory`]), so the loader refuses a
//! step budget whose buffers cannot fit, and the KV cache is sized from the memory they leave.
//! The inputs reach the device as one batch of copies (`gpu::runtime::copy_list`: one upload
//! through page-locked memory and one launch), so a step is queued without waiting for the one
//! before it on the device.

use std::borrow::Cow;

use cudarc::driver::CudaSlice;
use half::bf16;
use ndarray::s;
use oracle::hp1::AttnMetadata;
use oracle::model::weights::ModelDims;

use crate::error::{Error, Result};
use gpu::attention::prefill_plan::FAKE_DECODE_MAX_QUERY;
use gpu::attention::{prefill_path, Geometry, Plan, PrefillPath, StepGeometry};
use gpu::ops::HeadShape;
use gpu::runtime::{copy_list, CopyList};
use gpu::Gpu;

/// One step's inputs as the device takes them: the tokens, their metadata and cache slots, and
/// `picked`, the query rows that get logits in the order their logits rows come out. The oracle's
/// [`StepInput`](oracle::model::step::StepInput) names its rows by a rule; the executor picks its
/// own order (the sampled rows first, so the sampler reads the same first rows in every step).
#[derive(Clone, Copy, Debug)]
pub struct DeviceStep<'a> {
    /// `[num_tokens]` token ids, in `query_start_loc` order.
    pub token_ids: &'a [u32],
    /// Block table, sequence lengths after this step, query offsets.
    pub meta: &'a AttnMetadata,
    /// `[num_tokens]` cache slot of each new token.
    pub slot_mapping: &'a [i64],
    /// The query rows that get logits, each once, in their logits rows' order.
    pub picked: &'a [u32],
}

/// Appends to `picked` (the query rows that get logits, each once) the rows of `extra` it lacks,
/// in their order; returns each extra row's logits row (its index in `picked`).
pub fn picked_extra(picked: &mut Vec<u32>, extra: impl IntoIterator<Item = u32>) -> Vec<usize> {
    let mut at: std::collections::HashMap<u32, usize> = picked.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    extra
        .into_iter()
        .map(|r| {
            *at.entry(r).or_insert_with(|| {
                picked.push(r);
                picked.len() - 1
            })
        })
        .collect()
}

/// `rows` (ascending logits rows) as runs of consecutive rows, `(first, len)`, in order: one copy
/// each when only some rows come back to the host.
pub fn row_runs(rows: &[usize]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &r in rows {
        match runs.last_mut() {
            Some((first, len)) if *first + *len == r => *len += 1,
            _ => runs.push((r, 1)),
        }
    }
    runs
}

/// The most a step may bring; buffers are sized for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Query rows (tokens) in one step.
    pub max_tokens: usize,
    /// Sequences in one step.
    pub max_seqs: usize,
    /// Columns of the block table: the longest sequence, in blocks.
    pub max_blocks_per_seq: usize,
}

/// One metadata set on the device: what an attention launch over some of the step's sequences
/// reads (`seq_lens`, `query_start_loc` from 0, the block table's rows).
pub(crate) struct DeviceMeta {
    pub block_table: CudaSlice<i32>,
    pub seq_lens: CudaSlice<i32>,
    pub query_start_loc: CudaSlice<i32>,
}

impl DeviceMeta {
    fn new(gpu: &Gpu, cap: &Capacity) -> gpu::Result<Self> {
        Ok(Self {
            block_table: gpu.zeros(cap.max_seqs * cap.max_blocks_per_seq)?,
            seq_lens: gpu.zeros(cap.max_seqs)?,
            query_start_loc: gpu.zeros(cap.max_seqs + 1)?,
        })
    }

    /// Adds the copies of sequences `seqs` of `meta` (their table rows, lengths, and query
    /// offsets re-based to start at 0) to `inputs`.
    fn write(&mut self, inputs: &mut CopyList, meta: &AttnMetadata, seqs: std::ops::Range<usize>) -> gpu::Result<()> {
        // The rows' values in place where they lie contiguous (the scheduler's tables do).
        let rows = meta.block_table.slice(s![seqs.clone(), ..]);
        let table: Cow<'_, [i32]> = match rows.as_slice() {
            Some(flat) => Cow::Borrowed(flat),
            None => Cow::Owned(rows.iter().copied().collect()),
        };
        let base = meta.query_start_loc[seqs.start];
        let qsl: Vec<i32> = meta.query_start_loc[seqs.start..=seqs.end].iter().map(|&q| q - base).collect();
        inputs.stage(&table, &mut self.block_table.slice_mut(..table.len()))?;
        inputs.stage(&meta.seq_lens[seqs.clone()], &mut self.seq_lens.slice_mut(..seqs.len()))?;
        inputs.stage(&qsl, &mut self.query_start_loc.slice_mut(..qsl.len()))?;
        Ok(())
    }
}

/// How a step's sequences split between the decode kernels and a prefill launch: the first
/// `decodes` sequences bring one query row each, the rest longer chunks. Decode rows always run
/// on the decode kernels, so their bits never depend on a neighbour's chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Split {
    /// Leading one-row sequences.
    pub decodes: usize,
    /// Sequences in the step.
    pub seqs: usize,
    /// Longest query of the prefill sequences (0 when there are none).
    pub max_query_len: usize,
}

impl Split {
    /// The split of `meta`. The scheduler puts decode rows first; a step that mixes them
    /// otherwise is refused rather than run with bits that depend on the mix, and so is metadata
    /// whose parts disagree on the number of sequences ([`AttnMetadata::check_shape`]: the
    /// upload slices each part by it).
    pub fn of(meta: &AttnMetadata) -> Result<Self> {
        meta.check_shape()?;
        let lens: Vec<usize> = meta.query_start_loc.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
        let decodes = lens.iter().take_while(|&&l| l == 1).count();
        if let Some(late) = lens[decodes..].iter().position(|&l| l == 1) {
            return Err(Error::Scheduler(format!(
                "sequence {} of the step is a one-row query after a prefill chunk: the GPU backend needs decode rows first",
                decodes + late
            )));
        }
        Ok(Self { decodes, seqs: lens.len(), max_query_len: lens[decodes..].iter().copied().max().unwrap_or(0) })
    }
}

/// Activations, step inputs and attention metadata on the device.
pub(crate) struct StepBuffers {
    pub cap: Capacity,
    pub ids: CudaSlice<u32>,
    pub positions: CudaSlice<i32>,
    pub slots: CudaSlice<i64>,
    pub logit_rows: CudaSlice<u32>,
    /// The whole step's metadata; its leading sequences are the decode rows.
    pub meta: DeviceMeta,
    /// The prefill sequences' metadata (query offsets from 0), for a tensor-core launch over
    /// them alone.
    pub prefill_meta: DeviceMeta,
    pub row_seq: CudaSlice<i32>,
    pub row_len: CudaSlice<i32>,
    pub workspace: CudaSlice<f32>,
    pub counters: CudaSlice<i32>,
    pub x: CudaSlice<bf16>,
    pub x_next: CudaSlice<bf16>,
    pub h: CudaSlice<bf16>,
    pub qkv: CudaSlice<bf16>,
    pub q: CudaSlice<bf16>,
    pub attn: CudaSlice<bf16>,
    pub proj: CudaSlice<bf16>,
    pub gate_up: CudaSlice<bf16>,
    pub mlp: CudaSlice<bf16>,
    pub picked: CudaSlice<bf16>,
    pub logits: CudaSlice<bf16>,
    /// The step's inputs as one batch of copies through page-locked memory (one upload and one
    /// launch), so that queueing a step never waits for the step before it on the device; the
    /// executor adds the pending tokens and the sampling parameters before it ends the batch.
    pub inputs: CopyList,
}

/// The payload bytes of the most a step's inputs take (the padding between copies included): the
/// ids, positions, logit rows and slots, both metadata sets, and a sampling row per token.
fn input_bytes(cap: &Capacity) -> Option<usize> {
    let meta = cap.max_seqs.checked_mul(cap.max_blocks_per_seq)?.checked_add(2 * cap.max_seqs + 1)?;
    let per_token = 3 * 4 + 8 + std::mem::size_of::<gpu::ops::SamplingRow>();
    cap.max_tokens.checked_mul(per_token)?.checked_add(2 * 4 * meta)?.checked_add(8 * copy_list::MAX_ENTRIES)
}

impl StepBuffers {
    /// Allocates every buffer for `cap`. The split-K workspace and counters start at one element:
    /// their size depends on the attention plan of the widest step, which the forward sizes them
    /// for once.
    pub fn new(gpu: &Gpu, dims: &ModelDims, cap: Capacity) -> gpu::Result<Self> {
        let t = cap.max_tokens;
        let (hidden, inter) = (dims.hidden_size, dims.intermediate_size);
        let heads = HeadShape { num_heads: dims.num_heads, num_kv_heads: dims.num_kv_heads, head_dim: dims.head_dim };
        let (q_width, qkv_width) = (heads.q_width(), heads.qkv_width());
        Ok(Self {
            cap,
            ids: gpu.zeros(t)?,
            positions: gpu.zeros(t)?,
            slots: gpu.zeros(t)?,
            logit_rows: gpu.zeros(t)?,
            meta: DeviceMeta::new(gpu, &cap)?,
            prefill_meta: DeviceMeta::new(gpu, &cap)?,
            row_seq: gpu.zeros(t)?,
            row_len: gpu.zeros(t)?,
            workspace: gpu.zeros(1)?,
            counters: gpu.zeros(1)?,
            x: gpu.zeros(t * hidden)?,
            x_next: gpu.zeros(t * hidden)?,
            h: gpu.zeros(t * hidden)?,
            qkv: gpu.zeros(t * qkv_width)?,
            q: gpu.zeros(t * q_width)?,
            attn: gpu.zeros(t * q_width)?,
            proj: gpu.zeros(t * hidden)?,
            gate_up: gpu.zeros(t * 2 * inter)?,
            mlp: gpu.zeros(t * inter)?,
            picked: gpu.zeros(t * hidden)?,
            logits: gpu.zeros(t * dims.vocab_size)?,
            inputs: CopyList::new(
                gpu,
                input_bytes(&cap).ok_or_else(|| gpu::Error::Unsupported {
                    entry: "step inputs".into(),
                    reason: format!("a capacity of {cap:?} overflows"),
                })?,
            )?,
        })
    }

    /// Device bytes [`StepBuffers::new`] allocates for `cap` (the split-K workspace apart), or
    /// `None` past 2^64: checked before allocating, so a capacity that cannot fit is an error
    /// rather than an overflow or an allocation failure half-way.
    pub fn bytes(dims: &ModelDims, cap: &Capacity) -> Option<u64> {
        let heads = HeadShape { num_heads: dims.num_heads, num_kv_heads: dims.num_kv_heads, head_dim: dims.head_dim };
        let (hidden, inter) = (dims.hidden_size as u64, dims.intermediate_size as u64);
        let (q, qkv) = (heads.q_width() as u64, heads.qkv_width() as u64);
        // Per row: ids, positions, logit_rows, row_seq and row_len (4 bytes), slots (8); then x,
        // x_next, h, proj and picked (hidden), qkv, q and attn, gate_up and mlp, logits (bf16).
        let bf16_per_row = (5 * hidden).checked_add(qkv)?.checked_add(2 * q)?.checked_add(3 * inter)?;
        let bf16_per_row = bf16_per_row.checked_add(dims.vocab_size as u64)?;
        let per_row = bf16_per_row.checked_mul(2)?.checked_add(5 * 4 + 8)?;
        let rows = (cap.max_tokens as u64).checked_mul(per_row)?;
        // Two metadata sets: the block table, seq_lens and query_start_loc (i32).
        let seqs = cap.max_seqs as u64;
        let meta = seqs.checked_mul(cap.max_blocks_per_seq as u64)?.checked_add(2 * seqs + 1)?.checked_mul(2 * 4)?;
        // The inputs' block on the device (CopyList).
        let block = (copy_list::PAYLOAD as u64).checked_add(input_bytes(cap)? as u64)?;
        rows.checked_add(meta)?.checked_add(block)
    }

    /// Checks `step` against the capacity and begins a batch of the inputs' copies with its ids,
    /// positions, slots, metadata and picked rows (queued by `inputs.end()`); returns the split.
    pub fn upload(&mut self, step: &DeviceStep<'_>) -> Result<Split> {
        let (meta, picked) = (step.meta, step.picked);
        let tokens = step.token_ids.len();
        let seqs = meta.seq_lens.len();
        let width = meta.block_table.ncols();
        let cap = self.cap;
        if tokens == 0 || tokens > cap.max_tokens || seqs > cap.max_seqs || width > cap.max_blocks_per_seq {
            return Err(Error::Request(format!(
                "a step of {tokens} tokens, {seqs} sequences and {width} table columns is outside the GPU buffers' \
                 capacity ({} tokens, {} sequences, {} columns)",
                cap.max_tokens, cap.max_seqs, cap.max_blocks_per_seq
            )));
        }
        if picked.len() > tokens || picked.iter().any(|&r| r as usize >= tokens) {
            return Err(Error::Executor(format!("logit rows {picked:?} are not rows of a {tokens}-row step")));
        }
        let split = Split::of(meta)?;
        let positions = positions(meta);
        let inputs = &mut self.inputs;
        inputs.begin();
        inputs.stage(step.token_ids, &mut self.ids.slice_mut(..tokens))?;
        inputs.stage(&positions, &mut self.positions.slice_mut(..tokens))?;
        inputs.stage(step.slot_mapping, &mut self.slots.slice_mut(..tokens))?;
        inputs.stage(picked, &mut self.logit_rows.slice_mut(..picked.len()))?;
        self.meta.write(inputs, meta, 0..seqs)?;
        if split.decodes < seqs {
            self.prefill_meta.write(inputs, meta, split.decodes..seqs)?;
        }
        Ok(split)
    }
}

/// The decode-path attention plan of the widest step `cap` allows, whose split-K workspace no
/// other step's exceeds (it grows with the rows, at a width fixed by the longest sequence).
/// Decode rows (one per sequence) and fake-decode steps (every row of a step whose chunks are
/// at most [`FAKE_DECODE_MAX_QUERY`] tokens, so at most that many per sequence) run the decode
/// kernels; longer chunks run a tensor-core prefill, which has no split-K workspace, wherever
/// the device has one for the head dim. Only without one do all of a step's rows take the
/// decode path, and the workspace follows the step budget.
pub(crate) fn widest_decode_plan(
    dims: &ModelDims,
    cap: &Capacity,
    block_size: usize,
    compute_capability: (i32, i32),
) -> Result<Plan> {
    let geometry = |rows| Geometry {
        rows,
        num_heads: dims.num_heads,
        num_kv_heads: dims.num_kv_heads,
        head_dim: dims.head_dim,
        block_size,
        max_blocks_per_seq: cap.max_blocks_per_seq,
    };
    // Whether chunks past fake decode's length get a tensor-core prefill depends on the device
    // and head dim alone: one such chunk asks.
    let long = FAKE_DECODE_MAX_QUERY + 1;
    let long_chunk = StepGeometry { base: geometry(long), max_seqs: 1, max_query_len: long };
    let rows = match prefill_path(long_chunk, compute_capability)? {
        PrefillPath::Prefill(_) => cap.max_tokens.min(cap.max_seqs.saturating_mul(FAKE_DECODE_MAX_QUERY)),
        PrefillPath::FakeDecode(_) => cap.max_tokens,
    };
    Ok(Plan::auto(geometry(rows))?)
}

/// Device bytes of a model's step buffers for `cap`, the split-K workspace and its counters
/// included; `None` past 2^64. What [`super::forward::GpuModel::new`] allocates before it sizes
/// the cache.
pub fn step_memory(
    dims: &ModelDims,
    cap: &Capacity,
    block_size: usize,
    compute_capability: (i32, i32),
) -> Result<Option<u64>> {
    let Some(buffers) = StepBuffers::bytes(dims, cap) else { return Ok(None) };
    let widest = widest_decode_plan(dims, cap, block_size, compute_capability)?;
    let split_k = (widest.workspace_len.max(1) as u64).checked_add(widest.counter_len.max(1) as u64);
    Ok(split_k.and_then(|n| n.checked_mul(4)).and_then(|n| n.checked_add(buffers)))
}

/// Each query row's absolute position: row `j` of sequence `s` sits at `prefix_len + j`.
pub fn positions(meta: &AttnMetadata) -> Vec<i32> {
    let mut out = Vec::with_capacity(meta.num_tokens());
    for (s, w) in meta.query_start_loc.windows(2).enumerate() {
        let prefix = meta.seq_lens[s] - (w[1] - w[0]);
        out.extend((0..w[1] - w[0]).map(|j| prefix + j));
    }
    out
}

#[cfg(test)]
mod tests {
    use ndarray::Array2;

    use super::*;

    #[test]
    fn rows_merge_into_runs_of_consecutive_rows() {
        assert_eq!(row_runs(&[]), vec![]);
        assert_eq!(row_runs(&[0, 1, 2, 3]), vec![(0, 4)]);
        assert_eq!(row_runs(&[2, 5, 6, 9, 10, 11, 40]), vec![(2, 1), (5, 2), (9, 3), (40, 1)]);
    }

    #[test]
    fn extra_rows_are_picked_once_after_the_sampling_rows() {
        let mut picked = vec![7, 2, 11];
        assert_eq!(picked_extra(&mut picked, [0, 2, 3, 11, 12]), vec![3, 1, 4, 2, 5]);
        assert_eq!(picked, vec![7, 2, 11, 0, 3, 12]);
        assert_eq!(picked_extra(&mut picked, []), Vec::<usize>::new());
        assert_eq!(picked.len(), 6);
    }

    fn meta(lens: &[(i32, i32)]) -> AttnMetadata {
        let mut qsl = vec![0];
        for &(_, q) in lens {
            qsl.push(qsl.last().unwrap() + q);
        }
        AttnMetadata {
            block_table: Array2::zeros((lens.len(), 4)),
            seq_lens: lens.iter().map(|&(len, _)| len).collect(),
            query_start_loc: qsl,
        }
    }

    #[test]
    fn positions_continue_each_sequences_prefix() {
        assert_eq!(positions(&meta(&[(5, 1), (7, 3), (2, 2)])), vec![4, 4, 5, 6, 0, 1]);
    }

    #[test]
    fn decodes_must_come_first() {
        assert_eq!(
            Split::of(&meta(&[(5, 1), (9, 1), (7, 3), (4, 2)])).unwrap(),
            Split { decodes: 2, seqs: 4, max_query_len: 3 }
        );
        assert_eq!(Split::of(&meta(&[(5, 1)])).unwrap(), Split { decodes: 1, seqs: 1, max_query_len: 0 });
        let err = Split::of(&meta(&[(7, 3), (5, 1)])).unwrap_err().to_string();
        assert!(err.contains("sequence 1") && err.contains("decode rows first"), "{err}");
    }

    #[test]
    fn metadata_that_disagrees_on_its_sequences_is_refused() {
        let good = meta(&[(5, 1), (7, 3)]);
        for (bad, part) in [
            (AttnMetadata { block_table: Array2::zeros((1, 4)), ..good.clone() }, "block_table"),
            (AttnMetadata { query_start_loc: vec![0, 1], ..good.clone() }, "query_start_loc"),
            (AttnMetadata { seq_lens: vec![5, 7, 2], ..good.clone() }, "block_table"),
        ] {
            let err = Split::of(&bad).unwrap_err().to_string();
            assert!(err.contains(part), "{err}");
        }
        assert!(Split::of(&good).is_ok());
    }
}
