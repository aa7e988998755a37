//! The small kernels of the GPU model, between the GEMMs and the attention: embedding gather,
//! fused q/k norm + RoPE + KV-cache write, the Peri-LN norms with the residual add, SiLU-multiply,
//! and token selection (argmax and the Philox Gumbel-max sampler).
//!
//! Each op is a struct that loads its entry points once (`new`) and whose methods check every
//! buffer's size, alignment and the kernel's limits on the host, then only launch on the GPU's
//! stream: nothing here synchronises, allocates or copies, so a CUDA graph can capture a step.
//! Activations are bf16 (`half::bf16`), norm parameters and the RoPE table f32, and every op
//! rounds to bf16 exactly where `oracle::model::precision` says the GPU model does, so the oracle
//! in its bf16-faithful mode and these kernels differ only by f32 against f64 arithmetic.
//!
//! Inputs the host cannot see (token ids, positions, slots and logits live on the device) are
//! checked by the kernels, which mask what is out of range and count it in [`Faults`]; the engine
//! reads that word once per step with [`Faults::check`].

pub mod embedding;
pub mod fault;
pub mod norm;
pub mod qk_norm_rope;
pub mod rope_table;
pub mod sampling;
pub mod silu_mul;

use cudarc::driver::LaunchConfig;

use crate::error::{unsupported, Result};
use crate::runtime::check_aligned;

pub use embedding::{check_token_ids, Embedding};
pub use fault::{FaultKind, Faults};
pub use norm::{PeriLn, UClipNormParams};
pub use qk_norm_rope::{HeadShape, QkNormRopeCache, QkvInputs, QkvOutputs};
pub use rope_table::RopeTable;
pub use sampling::{Logit, Sampler, SamplingRow};
pub use silu_mul::SiluMul;

/// Threads per CTA of the elementwise kernels.
const ELEMENTWISE_THREADS: u32 = 256;

/// Most CTAs an elementwise launch uses (enough to fill any current GPU many times over); the
/// kernels' grid-stride loops take the rest.
const MAX_ELEMENTWISE_CTAS: u64 = 4096;

/// The launch of an elementwise kernel over `items` work items (at least one).
fn elementwise_config(items: u64) -> LaunchConfig {
    let ctas = items.div_ceil(u64::from(ELEMENTWISE_THREADS)).clamp(1, MAX_ELEMENTWISE_CTAS);
    LaunchConfig { grid_dim: (ctas as u32, 1, 1), block_dim: (ELEMENTWISE_THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// Rows a thread takes at one column in `peri_ln_residual.cu` and `silu_mul.cu` (`ROW_TILE`).
const ROW_TILE: u64 = 4;

/// Tokens a thread takes at one item in `qk_norm_rope_cache.cu` (`TOKEN_TILE`).
const TOKEN_TILE: u64 = 2;

/// The launch of a row-tiled elementwise kernel (`RowTiles` in ops_common.cuh) over `rows` rows
/// of `cols` items each (both at least one), `tile` rows a thread, with `rows` as the kernel's
/// int. The kernel counts items, and steps by the grid's threads, in an int: an error names the
/// entry where that would overflow.
fn row_tiles(entry: &str, rows: usize, cols: usize, tile: u64) -> Result<(LaunchConfig, i32)> {
    let items = (rows as u64).div_ceil(tile).saturating_mul(cols as u64);
    let cfg = elementwise_config(items);
    let threads = u64::from(cfg.grid_dim.0) * u64::from(cfg.block_dim.0);
    if items.saturating_add(threads) > i32::MAX as u64 {
        return Err(unsupported(entry, format!("{rows} rows of {cols} items do not fit the kernel's int indices")));
    }
    Ok((cfg, as_i32(entry, "rows", rows)?))
}

/// Fails unless buffer `what` holds exactly `want` elements.
fn check_len(entry: &str, what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(unsupported(entry, format!("`{what}` has {got} elements, expected {want}")))
    }
}

/// `value` as a kernel's `int`, or an error naming it.
fn as_i32(entry: &str, what: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| unsupported(entry, format!("{what} = {value} does not fit the kernel's int")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_launches_cover_every_item_with_a_capped_grid() {
        for items in [1u64, 255, 256, 257, 1 << 20, 1 << 40] {
            let cfg = elementwise_config(items);
            let (ctas, threads) = (u64::from(cfg.grid_dim.0), u64::from(cfg.block_dim.0));
            assert!((1..=MAX_ELEMENTWISE_CTAS).contains(&ctas), "{items}: {ctas} CTAs");
            assert!(ctas * threads >= items || ctas == MAX_ELEMENTWISE_CTAS, "{items}: {ctas} x {threads}");
        }
    }

    #[test]
    fn row_tiles_cover_every_tile_and_refuse_what_overflows_an_int() {
        for (rows, cols) in [(1usize, 1usize), (3, 128), (4, 128), (5, 128), (8448, 384), (100_000, 160)] {
            let (cfg, r) = row_tiles("k", rows, cols, ROW_TILE).unwrap();
            let tiles = (rows as u64).div_ceil(ROW_TILE) * cols as u64;
            let threads = u64::from(cfg.grid_dim.0) * u64::from(cfg.block_dim.0);
            assert!(threads >= tiles || cfg.grid_dim.0 as u64 == MAX_ELEMENTWISE_CTAS, "{rows} x {cols}");
            assert_eq!(r as usize, rows);
        }
        let e = row_tiles("peri_ln_residual", 1 << 30, 128, ROW_TILE).unwrap_err().to_string();
        assert!(e.contains("peri_ln_residual") && e.contains("1073741824 rows of 128"), "{e}");
        assert!(row_tiles("k", 1 << 31, 1, ROW_TILE).is_err());
        assert!(row_tiles("k", 1 << 29, 8, TOKEN_TILE).is_err());
        assert!(row_tiles("k", 1 << 28, 8, TOKEN_TILE).is_ok());
    }

    #[test]
    fn size_and_int_checks_name_the_buffer_and_the_values() {
        let e = check_len("k", "qkv", 3, 4).unwrap_err().to_string();
        assert!(e.contains("`k`") && e.contains("`qkv`") && e.contains('3') && e.contains('4'), "{e}");
        assert!(check_len("k", "qkv", 4, 4).is_ok());
        let e = as_i32("k", "tokens", 1 << 31).unwrap_err().to_string();
        assert!(e.contains("tokens = 2147483648"), "{e}");
        assert_eq!(as_i32("k", "tokens", 7).unwrap(), 7);
    }
}
