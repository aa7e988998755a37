//! Whole-step CUDA graphs of the pure decode step: every layer, the final norm, the LM head and
//! the sampler recorded once per bucket at load, then replayed with one launch per step (issue 9;
//! SPEC section 6). A step of `n` decode rows whose block tables are `w` columns wide runs the
//! graph of the smallest bucket `(rows >= n, width >= w)`: its inputs are padded to the bucket
//! on the host ([`pad_decode_step`]) and uploaded as one block, then the graph replays; its
//! first launch spreads the block into the step's buffers (`gpu::runtime::CopyList::spread`).
//!
//! Buckets: rows 1, 2, 4, ... up to the executor's `max_num_seqs` (itself the last bucket when it
//! is not a power of two), and table widths of 1K, 4K, 16K, ... tokens up to the longest
//! sequence. A graph's attention grid covers its width's capacity and its CTAs past a sequence's
//! length exit at once; the width buckets keep a 1K-context step from launching the empty CTAs
//! of a 32K capacity.
//!
//! A bucket whose rows fill one or two waves of the paired decode kernel
//! ([`EvenRows::grid_fits`]) keeps a second graph with that kernel as its attention
//! ([`DecodeAttention::Even`]), replayed when the step's rows, padding included, are even
//! ([`EvenRows::pays`]); the kernels give the same bits, so which graph a step replays changes no
//! output. `ASYNCT_EVEN_ROWS=0` captures none of them (to measure what they give).
//!
//! Padding rows decode token 0 at position 0 of a one-token sequence and sample greedily; their
//! tokens are dropped. Their slot is negative, which the cache-writing kernel reads as padding
//! (nothing is written), and their table points at block 0, which their attention only reads. None of this changes a real row's bits: every kernel of the step computes a row from
//! that row alone, the same way at every batch and table width (the decode kernels' and the
//! skinny GEMM's invariance), which `gpu_model` checks by comparing replays with eager steps.

use std::collections::BTreeMap;

use ndarray::{s, Array2};
use oracle::hp1::AttnMetadata;

use gpu::attention::{DecodeAttention, EvenRows};
use gpu::Graph;

use super::forward::{GpuModel, StepFacts, StepLaunch};
use super::step_buffers::{DeviceStep, Split};
use crate::error::Result;

/// The widest batch bucket whose graph launches with programmatic dependent launch. Measured on
/// the H200 (`verify/RESULTS.md`): run 44 found PDL taking 11% off a B1 step, nothing at B32 and
/// adding 4% at B128, so it stopped at 64 rows; with today's kernels (runs 114-115) it takes
/// 2% off B128 as well (five pairs of runs, each faster). Past 128 rows it is unmeasured.
const PDL_MAX_ROWS: usize = 128;

/// The context of the narrowest width bucket, in tokens; each next bucket is 4x wider.
const FIRST_WIDTH_TOKENS: usize = 1024;

/// A recorded decode step and the launches it replays (which must outlive it).
struct DecodeGraph {
    launch: StepLaunch,
    graph: Graph,
}

/// The graph a decode step replays: its bucket's shape, which its inputs are padded to, and the
/// attention it was recorded with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeBucket {
    /// The bucket's shape.
    pub shape: StepFacts,
    /// Which of the bucket's graphs.
    pub attention: DecodeAttention,
}

/// Every bucket's graphs.
pub struct DecodeGraphs {
    rows: Vec<usize>,
    widths: Vec<usize>,
    /// The rule for the even graphs; `None` when none were captured.
    even: Option<EvenRows>,
    graphs: BTreeMap<(usize, usize, DecodeAttention), DecodeGraph>,
}

impl DecodeGraphs {
    /// Plans and records the graph of every bucket for `max_seqs` rows and `max_width` table
    /// columns of `block_size` tokens; `sample(model, rows)` enqueues what follows the forward
    /// (the sampler over the first `rows` logits rows). `progress(done, total)` follows the
    /// captures.
    pub fn capture(
        model: &mut GpuModel,
        max_seqs: usize,
        max_width: usize,
        block_size: usize,
        mut sample: impl FnMut(&mut GpuModel, usize) -> Result<()>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Self> {
        let rows = row_buckets(max_seqs);
        let widths = width_buckets(max_width, block_size);
        let even = match std::env::var("ASYNCT_EVEN_ROWS").as_deref() {
            Ok("0") => None,
            _ => Some(model.even_rows()?),
        };
        let mut launches = Vec::new();
        for &r in &rows {
            let attentions: &[DecodeAttention] = match even {
                Some(e) if e.grid_fits(r) => &[DecodeAttention::Dispatched, DecodeAttention::Even],
                _ => &[DecodeAttention::Dispatched],
            };
            for &w in &widths {
                let split = Split { decodes: r, seqs: r, max_query_len: 0 };
                let shape = StepFacts { tokens: r, split, picked: r, picked_all: true, width: w };
                for &attention in attentions {
                    launches.push((attention, model.plan_with(shape, attention)?));
                }
            }
        }
        let total = launches.len();
        progress(0, total);
        let mut recorded = Vec::with_capacity(total);
        for (i, (_, launch)) in launches.iter().enumerate() {
            let rows = launch.shape().tokens;
            let graph =
                gpu::runtime::with_programmatic(rows <= PDL_MAX_ROWS, || model.capture(launch, |m| sample(m, rows)))?;
            recorded.push(graph);
            progress(i + 1, total);
        }
        let graphs = launches
            .into_iter()
            .zip(recorded)
            .map(|((attention, launch), graph)| {
                let shape = launch.shape();
                ((shape.tokens, shape.width, attention), DecodeGraph { launch, graph })
            })
            .collect();
        Ok(Self { rows, widths, even, graphs })
    }

    /// The graph for a decode step whose rows (one a sequence) have `seq_lens` keys in
    /// `width`-column tables, if a bucket holds it: the even graph where the real rows fill its
    /// bucket with even lengths, else the bucket's dispatched one.
    pub fn bucket(&self, seq_lens: &[i32], width: usize) -> Option<DecodeBucket> {
        let key = graph_key(&self.rows, &self.widths, self.even, seq_lens, width)?;
        let graph = self.graphs.get(&key)?;
        Some(DecodeBucket { shape: graph.launch.shape(), attention: key.2 })
    }

    /// Replays the graph of `bucket` on the inputs last uploaded (asynchronous).
    pub fn replay(&self, bucket: DecodeBucket) -> Result<()> {
        let DecodeBucket { shape, attention } = bucket;
        let graph = self.graphs.get(&(shape.tokens, shape.width, attention)).ok_or_else(|| {
            crate::error::Error::Executor(format!("no decode-step graph was captured for {bucket:?}"))
        })?;
        Ok(graph.graph.launch()?)
    }

    /// How many graphs there are.
    pub fn len(&self) -> usize {
        self.graphs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.graphs.is_empty()
    }
}

/// The key of the graph for decode rows of `seq_lens` keys in `width`-column tables among the
/// buckets `rows` x `widths`: the smallest bucket holding them, and its even graph where `even`
/// (the rule, when even graphs were captured) holds the rows even, padding included.
fn graph_key(
    rows: &[usize],
    widths: &[usize],
    even: Option<EvenRows>,
    seq_lens: &[i32],
    width: usize,
) -> Option<(usize, usize, DecodeAttention)> {
    let r = *rows.iter().find(|&&b| b >= seq_lens.len())?;
    let w = *widths.iter().find(|&&b| b >= width)?;
    let even = even.is_some_and(|e| e.pays(seq_lens, r));
    Some((r, w, if even { DecodeAttention::Even } else { DecodeAttention::Dispatched }))
}

/// Row buckets: powers of two below `max_seqs`, then `max_seqs`.
pub fn row_buckets(max_seqs: usize) -> Vec<usize> {
    let mut out: Vec<usize> =
        std::iter::successors(Some(1usize), |&r| Some(r * 2)).take_while(|&r| r < max_seqs).collect();
    out.push(max_seqs.max(1));
    out
}

/// Width buckets in blocks of `block_size` tokens: 1K tokens, 4x wider each, below `max_width`,
/// then `max_width`.
pub fn width_buckets(max_width: usize, block_size: usize) -> Vec<usize> {
    let first = FIRST_WIDTH_TOKENS.div_ceil(block_size.max(1));
    let mut out: Vec<usize> =
        std::iter::successors(Some(first), |&w| Some(w * 4)).take_while(|&w| w < max_width).collect();
    out.push(max_width.max(1));
    out
}

/// A decode step padded to a bucket, on the host.
pub struct PaddedStep {
    ids: Vec<u32>,
    meta: AttnMetadata,
    slots: Vec<i64>,
    /// Every row: each gets logits and a sampled token.
    picked: Vec<u32>,
}

impl PaddedStep {
    /// The step to upload.
    pub fn step(&self) -> DeviceStep<'_> {
        DeviceStep { token_ids: &self.ids, meta: &self.meta, slot_mapping: &self.slots, picked: &self.picked }
    }
}

/// `step` (every sequence one decode row, each picked) padded to `shape`'s rows and table width
/// with padding rows (module docs), which are picked too.
pub fn pad_decode_step(step: &DeviceStep<'_>, shape: StepFacts) -> PaddedStep {
    let (rows, width) = (shape.tokens, shape.width);
    let real = step.token_ids.len();
    let table = &step.meta.block_table;
    // Row by row. Filled an element at a time through a closure, and flattened the same way by
    // DeviceMeta::write, the table took most of a B128 step's host upload: 129 us, 34 since
    // (RESULTS run 120).
    let mut block_table = Array2::zeros((rows, width));
    let cols = table.ncols().min(width);
    for (s, row) in table.rows().into_iter().take(real.min(rows)).enumerate() {
        block_table.slice_mut(s![s, ..cols]).assign(&row.slice(s![..cols]));
    }
    let mut ids = step.token_ids.to_vec();
    ids.resize(rows, 0);
    let mut slots = step.slot_mapping.to_vec();
    slots.resize(rows, -1);
    let mut seq_lens = step.meta.seq_lens.clone();
    seq_lens.resize(rows, 1);
    PaddedStep {
        ids,
        meta: AttnMetadata { block_table, seq_lens, query_start_loc: (0..=rows as i32).collect() },
        slots,
        picked: (0..rows as u32).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_double_rows_and_quadruple_widths_up_to_the_capacity() {
        assert_eq!(row_buckets(256), vec![1, 2, 4, 8, 16, 32, 64, 128, 256]);
        assert_eq!(row_buckets(100), vec![1, 2, 4, 8, 16, 32, 64, 100]);
        assert_eq!(row_buckets(1), vec![1]);
        assert_eq!(width_buckets(2048, 16), vec![64, 256, 1024, 2048]);
        assert_eq!(width_buckets(64, 16), vec![64]);
        assert_eq!(width_buckets(10, 16), vec![10]);
    }

    #[test]
    fn a_step_replays_its_buckets_even_graph_only_when_its_rows_padding_included_are_even() {
        let (rows, widths) = (row_buckets(256), width_buckets(4096, 16));
        let even = Some(EvenRows { num_heads: 8, num_kv_heads: 4, sms: 132 });
        let key = |e, lens: &[i32], width| graph_key(&rows, &widths, e, lens, width);
        let (dispatched, even_graph) = (DecodeAttention::Dispatched, DecodeAttention::Even);
        assert_eq!(key(even, &[1000; 128], 70), Some((128, 256, even_graph)));
        assert_eq!(key(None, &[1000; 128], 70), Some((128, 256, dispatched)));
        // 120 even rows padded to 128 and 200 padded to 256 are too few; 125 of them are enough.
        assert_eq!(key(even, &[1000; 120], 70), Some((128, 256, dispatched)));
        assert_eq!(key(even, &[1000; 200], 70), Some((256, 256, dispatched)));
        assert_eq!(key(even, &[1000; 125], 70), Some((128, 256, even_graph)));
        let mut skewed = vec![64; 128];
        skewed[0] = 4000;
        assert_eq!(key(even, &skewed, 250), Some((128, 256, dispatched)));
        assert_eq!(key(even, &[1000; 300], 70), None);
        assert_eq!(key(even, &[1000; 128], 5000), None);
    }

    #[test]
    fn padding_rows_write_nothing_read_block_0_and_real_rows_keep_their_tables() {
        let meta = AttnMetadata {
            block_table: Array2::from_shape_vec((2, 2), vec![3, 4, 5, 0]).unwrap(),
            seq_lens: vec![20, 7],
            query_start_loc: vec![0, 1, 2],
        };
        let step = DeviceStep { token_ids: &[11, 12], meta: &meta, slot_mapping: &[67, 86], picked: &[0, 1] };
        let split = Split { decodes: 4, seqs: 4, max_query_len: 0 };
        let padded = pad_decode_step(&step, StepFacts { tokens: 4, split, picked: 4, picked_all: true, width: 3 });
        let s = padded.step();
        assert_eq!(s.token_ids, &[11, 12, 0, 0]);
        assert_eq!(s.slot_mapping, &[67, 86, -1, -1]);
        assert_eq!(s.meta.seq_lens, vec![20, 7, 1, 1]);
        assert_eq!(s.meta.query_start_loc, vec![0, 1, 2, 3, 4]);
        assert_eq!(s.meta.block_table.row(0).to_vec(), vec![3, 4, 0]);
        assert_eq!(s.meta.block_table.row(1).to_vec(), vec![5, 0, 0]);
        assert_eq!(s.meta.block_table.row(3).to_vec(), vec![0, 0, 0]);
        assert_eq!(padded.picked, vec![0, 1, 2, 3]);
    }
}
