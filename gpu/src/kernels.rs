//! The `.cu` sources of this crate, embedded in the binary and compiled at run time by NVRTC.
//!
//! Each file under `gpu/kernels/` is one path or one fused operation, with a header comment giving
//! its algorithm, launch shape, shared memory and assumptions. [`ALL`] lists every file, so one
//! test compiles them all (with only NVRTC, no GPU needed).

use crate::runtime::Kernel;

/// A kernel file as NVRTC compiles it: `pdl.cuh` (every entry point's programmatic dependent
/// launch), then `$header`s in order, then the file.
macro_rules! with_pdl {
    ($file:literal $(, $header:literal)*) => {
        Kernel {
            name: $file,
            source: concat!(
                include_str!("../kernels/pdl.cuh"),
                $(include_str!(concat!("../kernels/", $header)),)*
                include_str!(concat!("../kernels/", $file))
            ),
        }
    };
}

/// HP1 attention, decode and split-K (dense or sparse-index PV): the body in
/// `hp1_attention.cuh` (its header gives the algorithm) over the per-thread arithmetic of
/// `hp1_qk_pv.cuh`, the entry points in `hp1_decode.cu`.
pub const HP1_DECODE: Kernel =
    with_pdl!("hp1_decode.cu", "loads.cuh", "hp1_qk_pv.cuh", "hp1_split_finish.cuh", "hp1_attention.cuh");

/// A step's inputs, uploaded as one block, copied to their buffers ([`crate::runtime::CopyList`]).
pub const COPY_LIST: Kernel = with_pdl!("copy_list.cu");
/// A step's results written into mapped host memory ([`crate::ops::StepResults`]).
pub const STEP_RESULTS: Kernel = with_pdl!("step_results.cu");
/// Per-row metadata of a batch step (fake decode), shared by every layer's attention.
pub const HP1_ROWS: Kernel = with_pdl!("hp1_rows.cu");

/// Counts of the HP1 gate's exact zeros over a decode step's attention inputs
/// ([`crate::attention::GateStats`]).
pub const HP1_GATE_STATS: Kernel = with_pdl!("hp1_gate_stats.cu");

/// HP1 prefill on the tensor cores with `mma.sync` m16n8k16 bf16 (sm_80 and newer): the bf16
/// helpers and UClipNorm, the q norm + RoPE of a query tile read from qkv, the inline-PTX
/// wrappers, the register-fragment FIR gate, the query-tile lookup, then the kernel; see
/// `hp1_prefill_mma.cu`'s header.
pub const HP1_PREFILL_MMA: Kernel = with_pdl!(
    "hp1_prefill_mma.cu",
    "ops_common.cuh",
    "norm_rope.cuh",
    "tensor_core.cuh",
    "hp1_prefill_gate.cuh",
    "hp1_prefill_tiles.cuh"
);

/// A small per-token kernel: `ops_common.cuh` (bf16 vectors, UClipNorm, the fault word), then the
/// file.
macro_rules! with_ops_common {
    ($file:literal) => {
        with_pdl!($file, "ops_common.cuh")
    };
}

/// A GEMM file or one that runs GEMM bodies: `pdl.cuh`, `loads.cuh`, `ops_common.cuh` (bf16 and
/// its rounding), `norm_rope.cuh` (the RoPE rotation), `tensor_core.cuh` (the mma wrappers) and
/// the epilogues in `gemm_epilogue.cuh`, then `$header`s in order, then the file.
macro_rules! with_gemm_epilogue {
    ($file:literal $(, $header:literal)*) => {
        with_pdl!(
            $file,
            "loads.cuh",
            "ops_common.cuh",
            "norm_rope.cuh",
            "tensor_core.cuh",
            "gemm_epilogue.cuh"
            $(, $header)*
        )
    };
}

/// Fused q/k UClipNorm + RoPE + paged KV-cache write ([`crate::ops::qk_norm_rope`]):
/// `ops_common.cuh`, the per-chunk arithmetic in `norm_rope.cuh`, then the file.
pub const QK_NORM_ROPE_CACHE: Kernel = with_pdl!("qk_norm_rope_cache.cu", "ops_common.cuh", "norm_rope.cuh");

/// Peri-LN: fused norm + residual + norm, and the plain norm ([`crate::ops::norm`]).
pub const PERI_LN_RESIDUAL: Kernel = with_ops_common!("peri_ln_residual.cu");

/// `silu(gate) * up` ([`crate::ops::silu_mul`]).
pub const SILU_MUL: Kernel = with_ops_common!("silu_mul.cu");

/// The check of `ops_common.cuh`'s hardware bf16 rounding against its integer definition on every
/// f32 ([`crate::rounding_check`]); in [`CHECKS`], not [`ALL`]: no model loads it.
pub const BF16_ROUNDING: Kernel = with_ops_common!("bf16_rounding.cu");

/// Embedding gather ([`crate::ops::embedding`]).
pub const EMBEDDING: Kernel = with_ops_common!("embedding.cu");

/// Argmax and the Philox Gumbel-max sampler ([`crate::ops::sampling`]): `pdl.cuh`,
/// `ops_common.cuh`, `sampling_common.cuh`, `cluster.cuh`, then the file.
pub const SAMPLING: Kernel = with_pdl!("sampling.cu", "ops_common.cuh", "sampling_common.cuh", "cluster.cuh");

/// HP1 prefill on Hopper warpgroup MMAs (sm_90a): `ops_common.cuh` (bf16 and UClipNorm),
/// `norm_rope.cuh`, `tensor_core.cuh`, `hp1_prefill_gate.cuh`, `hp1_prefill_tiles.cuh`,
/// `wgmma.cuh`, then the file.
pub const HP1_PREFILL_WGMMA: Kernel = with_pdl!(
    "hp1_prefill_wgmma.cu",
    "ops_common.cuh",
    "norm_rope.cuh",
    "tensor_core.cuh",
    "hp1_prefill_gate.cuh",
    "hp1_prefill_tiles.cuh",
    "wgmma.cuh"
);

/// The skinny GEMM of decode-sized batches ([`crate::gemm`]): the body in `gemm_skinny.cuh` (its
/// header gives the algorithm), its staged forms in `gemm_skinny_staged.cuh`, then the entry
/// points in `gemm_skinny.cu`.
pub const GEMM_SKINNY: Kernel = with_gemm_epilogue!("gemm_skinny.cu", "gemm_skinny.cuh", "gemm_skinny_staged.cuh");

/// The WGMMA GEMM of prefill rows with the model's fused epilogues (sm_90a; [`crate::gemm`]):
/// `wgmma.cuh`, `tma.cuh` (the TMA copies and their mbarriers), then the kernel; see
/// `gemm_wgmma.cu`'s header.
pub const GEMM_WGMMA: Kernel = with_gemm_epilogue!("gemm_wgmma.cu", "wgmma.cuh", "tma.cuh");

/// The skinny GEMM's warpgroup form (sm_90a; [`crate::gemm`]): the skinny kernel's sums on wgmma
/// for decode batches past 32 rows; see `gemm_skinny_wg.cu`'s header.
pub const GEMM_SKINNY_WG: Kernel = with_gemm_epilogue!("gemm_skinny_wg.cu", "wgmma.cuh");

/// The skinny GEMM's wide form (sm_90a; [`crate::gemm`]): the skinny kernel's sums on wgmma for
/// decode batches of 65 to 128 rows, W read once by the TMA; see `gemm_skinny_wide.cu`'s header.
pub const GEMM_SKINNY_WIDE: Kernel = with_gemm_epilogue!("gemm_skinny_wide.cu", "wgmma.cuh", "tma.cuh");

/// The skinny GEMM's class form (sm_90; [`crate::gemm`]): the skinny order's classes of K steps
/// on the CTAs of a cluster, for decode batches of 9 to 64 rows; see `gemm_skinny_classes.cu`'s
/// header.
pub const GEMM_SKINNY_CLASSES: Kernel =
    with_gemm_epilogue!("gemm_skinny_classes.cu", "tma.cuh", "cluster.cuh", "class_fold.cuh", "gemm_skinny.cuh");

/// The skinny GEMM's class form on warpgroups (sm_90a; [`crate::gemm`]): the classes on the
/// CTAs of a cluster for decode batches of 65 to 128 rows, fed by the TMA; see
/// `gemm_skinny_classes_wg.cu`'s header.
pub const GEMM_SKINNY_CLASSES_WG: Kernel =
    with_gemm_epilogue!("gemm_skinny_classes_wg.cu", "wgmma.cuh", "tma.cuh", "cluster.cuh", "class_fold.cuh");

/// The persistent decode megakernel ([`crate::mega`]): every layer of a small decode step in one
/// launch, running the skinny GEMM's and the HP1 attention's bodies as tasks between grid
/// barriers; see `decode_mega.cu`'s header.
pub const DECODE_MEGA: Kernel = with_gemm_epilogue!(
    "decode_mega.cu",
    "gemm_skinny.cuh",
    "hp1_qk_pv.cuh",
    "hp1_split_finish.cuh",
    "hp1_attention.cuh"
);

/// Every kernel file of the crate.
pub const ALL: &[Kernel] = &[
    HP1_DECODE,
    HP1_ROWS,
    HP1_PREFILL_MMA,
    QK_NORM_ROPE_CACHE,
    PERI_LN_RESIDUAL,
    SILU_MUL,
    EMBEDDING,
    SAMPLING,
    HP1_PREFILL_WGMMA,
    GEMM_SKINNY,
    GEMM_WGMMA,
    GEMM_SKINNY_WG,
    GEMM_SKINNY_WIDE,
    GEMM_SKINNY_CLASSES,
    GEMM_SKINNY_CLASSES_WG,
    HP1_GATE_STATS,
    DECODE_MEGA,
    COPY_LIST,
    STEP_RESULTS,
];

/// Kernel files that check the other kernels' shared arithmetic (verify runs them; a model never
/// loads them, so a start does not compile them).
pub const CHECKS: &[Kernel] = &[BF16_ROUNDING];

/// The kernel files a device of compute capability `cc` runs: every one, less the tensor-core
/// tensor-core kernels it cannot run (a loader compiles these up front, the rest never).
pub fn for_device(cc: (i32, i32)) -> Vec<Kernel> {
    use crate::attention::PrefillKernel;
    let skipped = |k: &Kernel| {
        (*k == HP1_PREFILL_WGMMA && !PrefillKernel::Wgmma.runs_on(cc))
            || ([GEMM_WGMMA, GEMM_SKINNY_WG, GEMM_SKINNY_WIDE, GEMM_SKINNY_CLASSES, GEMM_SKINNY_CLASSES_WG].contains(k)
                && !crate::gemm::wgmma_runs_on(cc))
            || (*k == HP1_PREFILL_MMA && !PrefillKernel::Mma.runs_on(cc))
    };
    ALL.iter().filter(|k| !skipped(k)).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_runs_every_kernel_and_ampere_all_but_wgmma() {
        assert_eq!(for_device((9, 0)), ALL.to_vec());
        let ampere = for_device((8, 0));
        assert_eq!(ampere.len(), ALL.len() - 6);
        for wgmma in [
            HP1_PREFILL_WGMMA,
            GEMM_WGMMA,
            GEMM_SKINNY_WG,
            GEMM_SKINNY_WIDE,
            GEMM_SKINNY_CLASSES,
            GEMM_SKINNY_CLASSES_WG,
        ] {
            assert!(!ampere.contains(&wgmma), "{}", wgmma.name);
        }
        assert!(ampere.contains(&HP1_PREFILL_MMA));
    }
}
