//! [`AttnBuffers`]: one attention call's inputs uploaded to the device, with its row metadata,
//! output and split-K workspace, for tests and benchmarks (the engine owns buffers of its own and
//! hands [`Operands`] views of them to the same launches).
//!
//! Uploading checks the metadata against the cache on the host (block numbers in range, lengths
//! within the table), because the kernels trust them: a bad block number would be a memory fault
//! on the device, not an error. `q` and the output have `geometry.rows` rows; rows past the
//! batch's last query are padding (`q` zero, output written as zero by the kernels).

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use half::bf16;

use super::launch::{LayerBuffers, Operands, Settled};
use super::plan::Geometry;
use super::prefill_launch::PrefillOperands;
use super::rows::RowOperands;
use crate::error::{Error, Result};
use crate::runtime::Gpu;

/// One attention call's inputs on the host, in the shapes of SPEC section 2.
#[derive(Clone, Copy, Debug)]
pub struct HostInputs<'a> {
    /// `[num_tokens, Hq, D]` queries, `num_tokens = query_start_loc[num_seqs]`.
    pub q: &'a [bf16],
    /// `[num_blocks, block_size, Hkv, D]` keys.
    pub key_cache: &'a [bf16],
    /// `[num_blocks, block_size, Hkv, D]` values.
    pub value_cache: &'a [bf16],
    /// `[num_seqs, max_blocks_per_seq]` physical block numbers.
    pub block_table: &'a [i32],
    /// `[num_seqs]` tokens cached after this step.
    pub seq_lens: &'a [i32],
    /// `[num_seqs + 1]` cumulative query counts from 0.
    pub query_start_loc: &'a [i32],
    /// `[Hq]` FIR weights.
    pub sigma: &'a [f32],
    /// `[Hq]` output gains.
    pub gamma: &'a [f32],
}

/// One attention call's inputs on the host, owned (what tests and benchmarks build);
/// [`HostBatch::inputs`] lends them to [`AttnBuffers::upload`]. Shapes as in [`HostInputs`].
#[derive(Clone, Debug, Default)]
pub struct HostBatch {
    /// `[num_tokens, Hq, D]` queries.
    pub q: Vec<bf16>,
    /// `[num_blocks, block_size, Hkv, D]` keys.
    pub key_cache: Vec<bf16>,
    /// `[num_blocks, block_size, Hkv, D]` values.
    pub value_cache: Vec<bf16>,
    /// `[num_seqs, max_blocks_per_seq]` physical block numbers.
    pub block_table: Vec<i32>,
    /// `[num_seqs]` tokens cached after this step.
    pub seq_lens: Vec<i32>,
    /// `[num_seqs + 1]` cumulative query counts from 0.
    pub query_start_loc: Vec<i32>,
    /// `[Hq]` FIR weights.
    pub sigma: Vec<f32>,
    /// `[Hq]` output gains.
    pub gamma: Vec<f32>,
}

impl HostBatch {
    /// The views [`AttnBuffers::upload`] takes.
    pub fn inputs(&self) -> HostInputs<'_> {
        HostInputs {
            q: &self.q,
            key_cache: &self.key_cache,
            value_cache: &self.value_cache,
            block_table: &self.block_table,
            seq_lens: &self.seq_lens,
            query_start_loc: &self.query_start_loc,
            sigma: &self.sigma,
            gamma: &self.gamma,
        }
    }
}

/// The device buffers of one attention call of a fixed [`Geometry`].
pub struct AttnBuffers {
    geometry: Geometry,
    num_seqs: usize,
    num_tokens: usize,
    num_blocks: usize,
    layer: LayerSlices,
    seq_lens: CudaSlice<i32>,
    query_start_loc: CudaSlice<i32>,
    row_seq: CudaSlice<i32>,
    row_len: CudaSlice<i32>,
    workspace: Option<CudaSlice<f32>>,
    counters: Option<CudaSlice<i32>>,
}

/// The buffers behind [`LayerBuffers`], apart so that lending them borrows nothing else.
struct LayerSlices {
    q: CudaSlice<bf16>,
    key_cache: CudaSlice<bf16>,
    value_cache: CudaSlice<bf16>,
    block_table: CudaSlice<i32>,
    sigma: CudaSlice<f32>,
    gamma: CudaSlice<f32>,
    out: CudaSlice<bf16>,
}

impl LayerSlices {
    /// Views of every buffer, `q` packed (`q_row_stride = Hq * D`).
    fn views(&mut self, g: &Geometry) -> LayerBuffers<'_> {
        LayerBuffers {
            q: self.q.as_view(),
            q_row_stride: g.num_heads * g.head_dim,
            key_cache: self.key_cache.as_view(),
            value_cache: self.value_cache.as_view(),
            block_table: self.block_table.as_view(),
            sigma: self.sigma.as_view(),
            gamma: self.gamma.as_view(),
            out: self.out.as_view_mut(),
        }
    }
}

impl AttnBuffers {
    /// Checks `host` against `geometry` and uploads it; `q` is padded with zero rows to
    /// `geometry.rows`. No workspace yet: see [`AttnBuffers::reserve_workspace`].
    pub fn upload(gpu: &Gpu, geometry: Geometry, host: &HostInputs<'_>) -> Result<Self> {
        geometry.validate()?;
        let g = geometry;
        let (head_row, slot) = (g.num_heads * g.head_dim, g.block_size * g.num_kv_heads * g.head_dim);
        if host.key_cache.is_empty()
            || !host.key_cache.len().is_multiple_of(slot)
            || host.value_cache.len() != host.key_cache.len()
        {
            return bad(format!(
                "key_cache and value_cache must both be whole blocks of {slot} elements, got {} and {}",
                host.key_cache.len(),
                host.value_cache.len()
            ));
        }
        let num_blocks = host.key_cache.len() / slot;
        let num_seqs = host.seq_lens.len();
        let num_tokens = check_metadata(&g, num_blocks, host.block_table, host.seq_lens, host.query_start_loc)?;
        if host.q.len() != num_tokens * head_row {
            return bad(format!(
                "q must be [{num_tokens}, {}, {}], got {} elements",
                g.num_heads,
                g.head_dim,
                host.q.len()
            ));
        }
        if host.sigma.len() != g.num_heads || host.gamma.len() != g.num_heads {
            return bad(format!(
                "sigma and gamma must have {} entries, got {} and {}",
                g.num_heads,
                host.sigma.len(),
                host.gamma.len()
            ));
        }
        let mut q = gpu.zeros::<bf16>(g.rows * head_row)?;
        if num_tokens > 0 {
            gpu.stream().memcpy_htod(host.q, &mut q.slice_mut(..host.q.len()))?;
        }
        Ok(Self {
            geometry,
            num_seqs,
            num_tokens,
            num_blocks,
            layer: LayerSlices {
                q,
                key_cache: gpu.upload(host.key_cache)?,
                value_cache: gpu.upload(host.value_cache)?,
                block_table: gpu.upload(host.block_table)?,
                sigma: gpu.upload(host.sigma)?,
                gamma: gpu.upload(host.gamma)?,
                out: gpu.zeros(g.rows * head_row)?,
            },
            seq_lens: gpu.upload(host.seq_lens)?,
            query_start_loc: gpu.upload(host.query_start_loc)?,
            row_seq: gpu.zeros(g.rows)?,
            row_len: gpu.zeros(g.rows)?,
            workspace: None,
            counters: None,
        })
    }

    /// The geometry the buffers were made for.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// Sequences in the batch.
    pub fn num_seqs(&self) -> usize {
        self.num_seqs
    }

    /// Query rows of the batch (the rows of `q` that are not padding).
    pub fn num_tokens(&self) -> usize {
        self.num_tokens
    }

    /// Makes the split-K workspace hold at least `len` f32s ([`super::Plan::workspace_len`]),
    /// and, for `len > 0`, allocates the split-K chunk counters ([`super::Plan::counter_len`])
    /// zeroed once: every launch leaves them zero again.
    pub fn reserve_workspace(&mut self, gpu: &Gpu, len: usize) -> Result<()> {
        if self.workspace.as_ref().map_or(0, |w| w.len()) < len {
            self.workspace = Some(gpu.zeros(len)?);
        }
        if len > 0 && self.counters.is_none() {
            self.counters = Some(gpu.zeros(self.geometry.rows * self.geometry.num_heads)?);
        }
        Ok(())
    }

    /// Overwrites the batch metadata in place (same sizes, checked as on upload): what a
    /// replayed CUDA graph then reads.
    pub fn set_metadata(
        &mut self,
        gpu: &Gpu,
        block_table: &[i32],
        seq_lens: &[i32],
        query_start_loc: &[i32],
    ) -> Result<()> {
        if block_table.len() != self.layer.block_table.len() || seq_lens.len() != self.num_seqs {
            return bad(format!(
                "new metadata must keep {} sequences and {} table entries, got {} and {}",
                self.num_seqs,
                self.layer.block_table.len(),
                seq_lens.len(),
                block_table.len()
            ));
        }
        let num_tokens = check_metadata(&self.geometry, self.num_blocks, block_table, seq_lens, query_start_loc)?;
        if num_tokens != self.num_tokens {
            return bad(format!("new metadata must keep {} query rows, got {num_tokens}", self.num_tokens));
        }
        let stream = gpu.stream();
        stream.memcpy_htod(block_table, &mut self.layer.block_table)?;
        stream.memcpy_htod(seq_lens, &mut self.seq_lens)?;
        stream.memcpy_htod(query_start_loc, &mut self.query_start_loc)?;
        Ok(())
    }

    /// Fills the output with NaN, so that an element a launch forgets to write shows.
    pub fn poison_output(&mut self, gpu: &Gpu) -> Result<()> {
        let nan = vec![bf16::NAN; self.layer.out.len()];
        Ok(gpu.stream().memcpy_htod(&nan, &mut self.layer.out)?)
    }

    /// Fills the split-K workspace with NaN, so that a check sees which partials a launch wrote.
    pub fn poison_workspace(&mut self, gpu: &Gpu) -> Result<()> {
        if let Some(w) = self.workspace.as_mut() {
            gpu.stream().memcpy_htod(&vec![f32::NAN; w.len()], w)?;
        }
        Ok(())
    }

    /// The key and value caches, for a check that rewrites rows of them between launches.
    pub fn caches_mut(&mut self) -> (CudaViewMut<'_, bf16>, CudaViewMut<'_, bf16>) {
        (self.layer.key_cache.as_view_mut(), self.layer.value_cache.as_view_mut())
    }

    /// The output, `[rows, Hq, D]` (synchronises).
    pub fn download_output(&self, gpu: &Gpu) -> Result<Vec<bf16>> {
        gpu.download(&self.layer.out)
    }

    /// `(row_seq, row_len)` as the device holds them (synchronises).
    pub fn download_rows(&self, gpu: &Gpu) -> Result<(Vec<i32>, Vec<i32>)> {
        Ok((gpu.download(&self.row_seq)?, gpu.download(&self.row_len)?))
    }

    /// The buffers of the row-metadata launch.
    pub fn row_operands(&mut self) -> RowOperands<'_> {
        RowOperands {
            query_start_loc: self.query_start_loc.as_view(),
            seq_lens: self.seq_lens.as_view(),
            num_seqs: self.num_seqs,
            row_seq: self.row_seq.as_view_mut(),
            row_len: self.row_len.as_view_mut(),
        }
    }

    /// The buffers of a tensor-core prefill launch.
    pub fn prefill_operands(&mut self) -> PrefillOperands<'_> {
        PrefillOperands {
            layer: self.layer.views(&self.geometry),
            seq_lens: self.seq_lens.as_view(),
            query_start_loc: self.query_start_loc.as_view(),
            num_seqs: self.num_seqs,
            query_norm: None,
        }
    }

    /// The buffers of the attention launch, its predecessor having left `settled` alone.
    pub fn operands(&mut self, settled: Settled) -> Operands<'_> {
        Operands {
            layer: self.layer.views(&self.geometry),
            row_seq: self.row_seq.as_view(),
            row_len: self.row_len.as_view(),
            workspace: self.workspace.as_mut().map(|w| w.as_view_mut()),
            counters: self.counters.as_mut().map(|c| c.as_view_mut()),
            leave_partials: false,
            settled,
        }
    }

    /// The buffers of a split-K launch that leaves its partials in the workspace
    /// ([`Operands::leave_partials`]); read them with [`AttnBuffers::partials`].
    pub fn operands_leaving_partials(&mut self, settled: Settled) -> Operands<'_> {
        Operands { counters: None, leave_partials: true, ..self.operands(settled) }
    }

    /// The split-K workspace (the chunks' partials) and the rows' key counts: what
    /// [`crate::gemm::FoldedX`] reads. `None` without a workspace (a decode plan).
    pub fn partials(&self) -> Option<(CudaView<'_, f32>, CudaView<'_, i32>)> {
        Some((self.workspace.as_ref()?.as_view(), self.row_len.as_view()))
    }
}

fn bad<T>(reason: String) -> Result<T> {
    Err(Error::Unsupported { entry: "hp1 attention buffers".to_string(), reason })
}

/// Checks the batch metadata against the geometry and a cache of `num_blocks` blocks; returns
/// the number of query rows.
fn check_metadata(
    g: &Geometry,
    num_blocks: usize,
    block_table: &[i32],
    seq_lens: &[i32],
    query_start_loc: &[i32],
) -> Result<usize> {
    let n = seq_lens.len();
    if block_table.len() != n * g.max_blocks_per_seq {
        return bad(format!("block_table must be [{n}, {}], got {} entries", g.max_blocks_per_seq, block_table.len()));
    }
    let qsl = query_start_loc;
    if qsl.len() != n + 1 || qsl[0] != 0 || qsl.windows(2).any(|w| w[1] < w[0]) {
        return bad(format!("query_start_loc must be {} non-decreasing counts from 0, got {qsl:?}", n + 1));
    }
    let num_tokens = qsl[n] as usize;
    if num_tokens > g.rows {
        return bad(format!("the batch has {num_tokens} query rows, the geometry {}", g.rows));
    }
    for s in 0..n {
        let (len, query_len) = (seq_lens[s], qsl[s + 1] - qsl[s]);
        if len < query_len {
            return bad(format!("sequence {s}: seq_len {len} is below its query_len {query_len}"));
        }
        let need = (len as usize).div_ceil(g.block_size);
        if need > g.max_blocks_per_seq {
            return bad(format!(
                "sequence {s} needs {need} blocks for {len} tokens, the table holds {}",
                g.max_blocks_per_seq
            ));
        }
        let row = &block_table[s * g.max_blocks_per_seq..][..need];
        if let Some((b, id)) = row.iter().enumerate().find(|(_, &id)| id < 0 || id as usize >= num_blocks) {
            return bad(format!("sequence {s} entry {b} is block {id}, the cache has {num_blocks}"));
        }
    }
    Ok(num_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry() -> Geometry {
        Geometry { rows: 4, num_heads: 2, num_kv_heads: 1, head_dim: 64, block_size: 16, max_blocks_per_seq: 2 }
    }

    #[test]
    fn good_metadata_counts_its_rows() {
        // A decode at 17 tokens (two blocks) and a prefill of 3.
        let rows = check_metadata(&geometry(), 3, &[2, 0, 1, 0], &[17, 3], &[0, 1, 4]).unwrap();
        assert_eq!(rows, 4);
    }

    #[test]
    fn bad_metadata_is_refused_with_the_values() {
        let g = geometry();
        let refused = |table: &[i32], lens: &[i32], qsl: &[i32], needle: &str| {
            let err = check_metadata(&g, 3, table, lens, qsl).unwrap_err().to_string();
            assert!(err.contains(needle), "expected `{needle}` in: {err}");
        };
        refused(&[2, 0, 1], &[17, 3], &[0, 1, 4], "block_table must be [2, 2], got 3");
        refused(&[2, 0, 1, 0], &[17, 3], &[0, 2, 1], "non-decreasing");
        refused(&[2, 0, 1, 0], &[17, 3], &[1, 2, 4], "from 0");
        refused(&[2, 0, 1, 0], &[17, 3], &[0, 1, 5], "5 query rows, the geometry 4");
        refused(&[2, 0, 1, 0], &[17, 2], &[0, 1, 4], "seq_len 2 is below its query_len 3");
        refused(&[2, 0, 1, 0], &[33, 3], &[0, 1, 4], "needs 3 blocks for 33 tokens");
        refused(&[2, 3, 1, 0], &[17, 3], &[0, 1, 4], "entry 1 is block 3, the cache has 3");
        refused(&[2, 0, -1, 0], &[17, 3], &[0, 1, 4], "sequence 1 entry 0 is block -1");
    }
}
