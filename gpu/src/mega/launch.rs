//! Launching the decode megakernel: [`DecodeMega`] holds one entry (a row tile and a head dim),
//! its grid and its barrier words; [`DecodeMega::upload`] checks a step's ops against the entry
//! and puts their table on the device once, and [`DecodeMega::run`] only launches, so a CUDA
//! graph captures it.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig};

use super::{encode, refuse, row_tile, MegaKind, MegaOp, HEAD_DIMS};
use crate::error::Result;
use crate::kernels::DECODE_MEGA;
use crate::runtime::{launch_error, Gpu, Launch};

/// Threads per CTA (`mega::THREADS`).
const THREADS: u32 = 256;
/// CTAs per SM the launch bounds allow.
const MAX_CTAS_PER_SM: u32 = 2;

/// The megakernel for steps of up to [`DecodeMega::rows`] rows and one head dim, loaded.
pub struct DecodeMega {
    func: CudaFunction,
    entry: String,
    stream: Arc<CudaStream>,
    rows: usize,
    head_dim: usize,
    grid: u32,
    /// Whether each launch prints CTA 0's time per op kind (`ASYNCT_MEGA_REPORT=1`).
    report: i32,
    /// The grid barrier's two words (the kernel leaves them zero after every launch).
    barrier: CudaSlice<u32>,
}

/// A step's descriptor table on the device.
pub struct MegaTable {
    table: CudaSlice<u64>,
    ops: i32,
}

impl MegaTable {
    /// Ops in the table.
    pub fn len(&self) -> usize {
        self.ops as usize
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.ops == 0
    }
}

impl DecodeMega {
    /// Loads the entry for steps of `rows` rows and heads of `head_dim` (compiling
    /// `decode_mega.cu` on first use). Its grid is every CTA the device holds at once, up to
    /// two an SM: the grid barrier needs all of them resident.
    pub fn new(gpu: &Gpu, rows: usize, head_dim: usize) -> Result<Self> {
        let tile = row_tile(rows).ok_or_else(|| refuse(format!("no row tile holds {rows} rows")))?;
        if !HEAD_DIMS.contains(&head_dim) {
            return Err(refuse(format!("head_dim must be one of {HEAD_DIMS:?}, got {head_dim}")));
        }
        let entry = entry(tile, head_dim);
        let func = gpu.function(&DECODE_MEGA, &entry)?;
        let per_sm = func.occupancy_max_active_blocks_per_multiprocessor(THREADS, 0, None)?.min(ctas_per_sm());
        if per_sm == 0 {
            return Err(refuse(format!("{entry} fits no CTA on an SM")));
        }
        let grid = per_sm * gpu.multiprocessors()? as u32;
        let report = i32::from(std::env::var("ASYNCT_MEGA_REPORT").is_ok_and(|v| v == "1"));
        Ok(Self {
            func,
            entry,
            stream: gpu.stream().clone(),
            rows: tile,
            head_dim,
            grid,
            report,
            barrier: gpu.zeros(2)?,
        })
    }

    /// Rows of x the entry serves, at most.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// CTAs per launch.
    pub fn grid(&self) -> u32 {
        self.grid
    }

    /// Checks `ops` against the entry (every GEMM within its rows, every attention of its head
    /// dim) and uploads their table (synchronously: never during a capture).
    pub fn upload(&self, gpu: &Gpu, ops: &[MegaOp]) -> Result<MegaTable> {
        for op in ops {
            let is_attention = matches!(op.kind, MegaKind::AttnDecode | MegaKind::AttnSplit);
            if op.rows > self.rows {
                return Err(refuse(format!(
                    "a {:?} op of {} rows in {}, which serves {}",
                    op.kind, op.rows, self.entry, self.rows
                )));
            }
            if is_attention && op.head_dim != Some(self.head_dim) {
                return Err(refuse(format!(
                    "{} runs head_dim {}, an op has {:?}",
                    self.entry, self.head_dim, op.head_dim
                )));
            }
        }
        let ops_len = i32::try_from(ops.len()).map_err(|_| refuse(format!("{} ops is too many", ops.len())))?;
        Ok(MegaTable { table: gpu.upload(&encode(ops))?, ops: ops_len })
    }

    /// Launches the step of `table` (a table this entry uploaded). Launch only.
    pub fn run(&mut self, table: &MegaTable) -> Result<()> {
        let cfg = LaunchConfig { grid_dim: (self.grid, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(&table.table).arg(&table.ops).arg(&mut self.barrier).arg(&self.report);
        // SAFETY: the arguments match DECODE_MEGA_ENTRY (the table, its op count, the barrier's
        // two zeroed words, the report flag); every op in the table was checked as its standalone launch checks it
        // (MegaOp's constructors) and against this entry (`upload`); the grid is what the
        // occupancy query says is resident at once.
        unsafe { b.launch(cfg) }.map_err(launch_error(&self.entry, &cfg))?;
        Ok(())
    }
}

/// CTAs per SM to launch: [`MAX_CTAS_PER_SM`], or 1 where `ASYNCT_MEGA_CTAS_PER_SM=1` asks, to
/// measure what the second CTA buys.
fn ctas_per_sm() -> u32 {
    match std::env::var("ASYNCT_MEGA_CTAS_PER_SM").as_deref() {
        Ok("1") => 1,
        _ => MAX_CTAS_PER_SM,
    }
}

/// The entry point for a row tile and a head dim.
fn entry(tile: usize, head_dim: usize) -> String {
    format!("decode_mega_m{tile}_d{head_dim}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mega::ROW_TILES;
    use crate::runtime::cubin::functions;
    use crate::runtime::kernel_cache::compile;
    use crate::runtime::nvrtc_available;

    #[test]
    fn every_entry_a_step_can_name_is_in_the_compiled_kernel() {
        if !nvrtc_available() {
            println!("SKIPPED: no NVRTC library here (scripts/local-nvrtc.sh installs one)");
            return;
        }
        let names = functions(&compile(&DECODE_MEGA, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
        for tile in ROW_TILES {
            for d in HEAD_DIMS {
                assert!(names.contains(&entry(tile, d)), "{} missing", entry(tile, d));
            }
        }
    }
}
