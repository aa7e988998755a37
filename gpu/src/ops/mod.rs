//! The small kernels of the GPU model, between the GEMMs and the attention: embedding gather,
//! fused q/k norm + RoPE + KV-cache write, the Peri-LN norms with the residual add, SiLU-multiply,
//! token selection (argmax and the Philox Gumbel-max sampler), and a step's results written into
//! mapped host memory.
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
pub mod step_results;

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
pub use step_results::StepResults;

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
    fn size_and_int_checks_name_the_buffer_and_the_values() {
        let e = check_len("k", "qkv", 3, 4).unwrap_err().to_string();
        assert!(e.contains("`k`") && e.contains("`qkv`") && e.contains('3') && e.contains('4'), "{e}");
        assert!(check_len("k", "qkv", 4, 4).is_ok());
        let e = as_i32("k", "tokens", 1 << 31).unwrap_err().to_string();
        assert!(e.contains("tokens = 2147483648"), "{e}");
        assert_eq!(as_i32("k", "tokens", 7).unwrap(), 7);
    }
}
