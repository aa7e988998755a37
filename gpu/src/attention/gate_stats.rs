//! The HP1 gate's exact zeros on the device: [`GateStats`] launches `hp1_gate_stats.cu` over one
//! layer's decode-step attention inputs (the same [`LayerBuffers`] and row metadata the attention
//! launch takes) and adds the layer's count of zero weights `p_t` and of weights computed into two
//! `u64` counters; [`GateStats::read`] brings them back as [`GateCounts`].
//!
//! What it is for: SPEC section 7's second memory floor of a decode step skips the V rows of zero
//! gates at the zero fraction measured on that step. The kernel repeats the decode kernel's score
//! and gate arithmetic operation for operation, so the keys it counts are exactly those the
//! sparse-index PV skips.
//!
//! Per step: [`GateStats::zero`] the counters, [`GateStats::run`] once per layer (each adds to
//! them), then [`GateStats::read`]. `zero` and `run` only enqueue (a CUDA graph may capture them);
//! `read` synchronises.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut, LaunchConfig};

use super::launch::{check_len, GateParams, LayerBuffers};
use super::plan::Geometry;
use crate::error::{unsupported, Result};
use crate::kernels::HP1_GATE_STATS;
use crate::runtime::{launch_error, Gpu, Launch};

/// The kernel's entry point.
pub const ENTRY: &str = "hp1_gate_stats";
/// Threads per CTA (`THREADS` in the kernel).
const THREADS: u32 = 128;

/// Gate weights counted on the device: `counters[0]` and `counters[1]` of [`GateStats::run`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateCounts {
    /// Weights `p_t` exactly zero (+0 or -0).
    pub zeros: u64,
    /// Weights computed: `row_len` keys for every row and query head.
    pub total: u64,
}

impl GateCounts {
    /// `zeros / total`, or 0 when nothing was counted.
    pub fn zero_fraction(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.zeros as f64 / self.total as f64
        }
    }
}

/// `hp1_gate_stats` loaded, ready to launch on the GPU's stream.
pub struct GateStats {
    stream: Arc<CudaStream>,
    function: CudaFunction,
}

impl GateStats {
    /// Loads the kernel (compiling `hp1_gate_stats.cu` on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), function: gpu.function(&HP1_GATE_STATS, ENTRY)? })
    }

    /// Sets both counters to zero (enqueued on the stream).
    pub fn zero(&self, counters: &mut CudaViewMut<'_, u64>) -> Result<()> {
        check_len(ENTRY, "counters", counters.len(), 2)?;
        Ok(self.stream.memset_zeros(&mut counters.slice_mut(..2))?)
    }

    /// Adds one layer's counts to `counters` (`[2]`: zeros, then total): every row of
    /// `geometry.rows` (padding rows, `row_len` 0, count nothing), every query head, keys
    /// `0 .. row_len`. `layer` and `row_seq`/`row_len` are the views the decode attention of the
    /// layer takes ([`super::Operands`]); its `value_cache` and `out` are checked as for the
    /// attention but not read. Checks the gate, the geometry and every buffer first. Launch only.
    pub fn run(
        &self,
        layer: &LayerBuffers<'_>,
        row_seq: &CudaView<'_, i32>,
        row_len: &CudaView<'_, i32>,
        geometry: &Geometry,
        gate: &GateParams,
        counters: &mut CudaViewMut<'_, u64>,
    ) -> Result<()> {
        gate.validate()?;
        geometry.validate()?;
        let g = *geometry;
        layer.check(ENTRY, &g, &self.stream)?;
        let block_table_len = layer.block_table.len();
        if block_table_len < g.max_blocks_per_seq || !block_table_len.is_multiple_of(g.max_blocks_per_seq) {
            return Err(unsupported(
                ENTRY,
                format!("block_table must be whole rows of {} entries, got {block_table_len}", g.max_blocks_per_seq),
            ));
        }
        check_len(ENTRY, "row_seq", row_seq.len(), g.rows)?;
        check_len(ENTRY, "row_len", row_len.len(), g.rows)?;
        check_len(ENTRY, "counters", counters.len(), 2)?;
        let grid = grid(&g)?;

        let q_row_stride = layer.q_row_stride as i64;
        let (max_blocks, heads, kv_heads) = (g.max_blocks_per_seq as i32, g.num_heads as i32, g.num_kv_heads as i32);
        let (head_dim, log2_block) = (g.head_dim as i32, g.block_size.trailing_zeros() as i32);
        let (fir_k, relu_pre) = (gate.fir_k as i32, i32::from(gate.relu_pre));
        let cfg = LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut launch = Launch::new(&self.stream, &self.function);
        launch
            .arg(&layer.q)
            .arg(&q_row_stride)
            .arg(&layer.key_cache)
            .arg(&layer.block_table)
            .arg(&max_blocks)
            .arg(row_seq)
            .arg(row_len)
            .arg(&layer.sigma)
            .arg(&layer.gamma)
            .arg(&heads)
            .arg(&kv_heads)
            .arg(&head_dim)
            .arg(&log2_block)
            .arg(&gate.scale)
            .arg(&fir_k)
            .arg(&relu_pre)
            .arg(&gate.clip_min)
            .arg(&gate.clip_max)
            .arg(counters);
        // SAFETY: the arguments match `hp1_gate_stats`'s signature in order and size, and every
        // buffer was checked above against what the grid reads (q, the cache, the per-head arrays
        // and the row metadata for `geometry.rows` rows) and writes (two counters).
        unsafe { launch.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }

    /// The counters' values once the stream's work is done (synchronises).
    pub fn read(&self, counters: &CudaView<'_, u64>) -> Result<GateCounts> {
        check_len(ENTRY, "counters", counters.len(), 2)?;
        let mut host = [0u64; 2];
        self.stream.memcpy_dtoh(&counters.slice(..2), &mut host)?;
        self.stream.synchronize()?;
        Ok(GateCounts { zeros: host[0], total: host[1] })
    }
}

/// One CTA per (row, query head): `rows * Hq`, refused past the grid's 2^31 - 1.
fn grid(g: &Geometry) -> Result<u32> {
    match g.rows.checked_mul(g.num_heads) {
        Some(n) if n <= i32::MAX as usize => Ok(n as u32),
        _ => Err(unsupported(
            ENTRY,
            format!("rows {} x heads {} CTAs must stay under 2^31, the grid's limit", g.rows, g.num_heads),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cubin::functions;
    use crate::runtime::kernel_cache::compile;
    use crate::runtime::nvrtc_available;

    fn geometry(rows: usize) -> Geometry {
        Geometry { rows, num_heads: 8, num_kv_heads: 4, head_dim: 128, block_size: 16, max_blocks_per_seq: 64 }
    }

    #[test]
    fn the_grid_is_a_cta_per_row_and_head_and_refuses_past_its_limit() {
        assert_eq!(grid(&geometry(32)).unwrap(), 256);
        let max = i32::MAX as usize / 8;
        assert_eq!(grid(&geometry(max)).unwrap() as usize, max * 8);
        let err = grid(&geometry(max + 1)).unwrap_err().to_string();
        assert!(err.contains(&format!("rows {} x heads 8", max + 1)), "{err}");
    }

    #[test]
    fn the_zero_fraction_of_nothing_is_zero() {
        assert_eq!(GateCounts::default().zero_fraction(), 0.0);
        assert_eq!(GateCounts { zeros: 3, total: 4 }.zero_fraction(), 0.75);
    }

    #[test]
    fn the_entry_is_in_the_compiled_kernel() {
        if !nvrtc_available() {
            println!("SKIPPED: no NVRTC library here (scripts/local-nvrtc.sh installs one)");
            return;
        }
        let cubin = compile(&HP1_GATE_STATS, "sm_90a").unwrap_or_else(|e| panic!("{e}"));
        assert!(functions(&cubin).unwrap().iter().any(|f| f == ENTRY), "{ENTRY} missing");
    }
}
