//! The MLP's gated product, `silu(gate) * up`, on the output of one fused gate/up GEMM
//! (`silu_mul.cu`), whose weight is in the interleaved gate/up layout of [`crate::gemm::layout`].
//! The skinny GEMM's [`crate::gemm::EpilogueKind::SiluMul`] computes the same bits inside the
//! GEMM (decode rows); this op serves the rows cuBLASLt computes.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, CudaViewMut, LaunchConfig};
use half::bf16;

use super::{as_i32, check_aligned, check_len, elementwise_config, unsupported};
use crate::error::Result;
use crate::kernels::SILU_MUL;
use crate::runtime::{launch_error, Gpu, Launch};

/// `silu_mul.cu`, loaded.
pub struct SiluMul {
    stream: Arc<CudaStream>,
    func: CudaFunction,
}

impl SiluMul {
    /// Loads `silu_mul.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), func: gpu.function(&SILU_MUL, "silu_mul")? })
    }

    /// `out[t, c] = bf16(silu(gate[t, c]) * up[t, c])`: `gate_up` is `[tokens, 2 * intermediate]`
    /// with each row in the interleaved layout ([`crate::gemm::layout`]: channel `c = 8 i + j`'s
    /// gate at `16 i + j`, its up at `16 i + 8 + j`), `out` `[tokens, intermediate]`;
    /// `intermediate` a multiple of 8. Launch only.
    pub fn run(
        &self,
        gate_up: &CudaView<'_, bf16>,
        intermediate: usize,
        out: &mut CudaViewMut<'_, bf16>,
    ) -> Result<()> {
        const ENTRY: &str = "silu_mul";
        if intermediate == 0 || !intermediate.is_multiple_of(8) {
            return Err(unsupported(
                ENTRY,
                format!("intermediate must be a positive multiple of 8, got {intermediate}"),
            ));
        }
        if !out.len().is_multiple_of(intermediate) {
            return Err(unsupported(
                ENTRY,
                format!("`out` has {} elements, not whole rows of {intermediate}", out.len()),
            ));
        }
        let tokens = out.len() / intermediate;
        check_len(ENTRY, "gate_up", gate_up.len(), tokens * 2 * intermediate)?;
        check_aligned(&self.stream, ENTRY, "gate_up", gate_up)?;
        check_aligned(&self.stream, ENTRY, "out", out)?;
        if tokens == 0 {
            return Ok(());
        }
        let inter = as_i32(ENTRY, "intermediate", intermediate)?;
        let (cfg, tokens) = row_tiles(ENTRY, tokens, intermediate / 8)?;
        let mut b = Launch::new(&self.stream, &self.func);
        b.arg(gate_up).arg(out).arg(&tokens).arg(&inter);
        // SAFETY: the arguments match `silu_mul` in silu_mul.cu; sizes and alignment checked above.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}

/// Rows a thread takes at one column in `silu_mul.cu` (`ROW_TILE`).
const ROW_TILE: u64 = 4;

/// The launch of `silu_mul.cu`'s row tiles over `rows` rows of `cols` items each (both at least
/// one), with `rows` as the kernel's int. The kernel counts items, and steps by the grid's
/// threads, in an int: an error names the entry where that would overflow.
fn row_tiles(entry: &str, rows: usize, cols: usize) -> Result<(LaunchConfig, i32)> {
    let items = (rows as u64).div_ceil(ROW_TILE).saturating_mul(cols as u64);
    let cfg = elementwise_config(items);
    let threads = u64::from(cfg.grid_dim.0) * u64::from(cfg.block_dim.0);
    if items.saturating_add(threads) > i32::MAX as u64 {
        return Err(unsupported(entry, format!("{rows} rows of {cols} items do not fit the kernel's int indices")));
    }
    Ok((cfg, as_i32(entry, "rows", rows)?))
}

#[cfg(test)]
mod tests {
    use super::super::MAX_ELEMENTWISE_CTAS;
    use super::*;

    #[test]
    fn row_tiles_cover_every_tile_and_refuse_what_overflows_an_int() {
        for (rows, cols) in [(1usize, 1usize), (3, 128), (4, 128), (5, 128), (8448, 384), (100_000, 160)] {
            let (cfg, r) = row_tiles("k", rows, cols).unwrap();
            let tiles = (rows as u64).div_ceil(ROW_TILE) * cols as u64;
            let threads = u64::from(cfg.grid_dim.0) * u64::from(cfg.block_dim.0);
            assert!(threads >= tiles || cfg.grid_dim.0 as u64 == MAX_ELEMENTWISE_CTAS, "{rows} x {cols}");
            assert_eq!(r as usize, rows);
        }
        let e = row_tiles("silu_mul", 1 << 30, 128).unwrap_err().to_string();
        assert!(e.contains("silu_mul") && e.contains("1073741824 rows of 128"), "{e}");
        assert!(row_tiles("k", 1 << 31, 1).is_err());
        assert!(row_tiles("k", 1 << 30, 8).is_err());
        assert!(row_tiles("k", 1 << 29, 8).is_ok());
    }
}
