//! The GEMMs of the GPU model (`gpu::gemm`: the skinny kernel, the WGMMA kernel on sm_90, cuBLASLt) held
//! against an f64 reference on bf16 inputs (issue 9). Without a GPU every check says it skipped
//! (`verify::gpu_harness`).
//!
//! Checks: a few small shapes on every path (for compute-sanitizer); drawn shapes (M of 1, 2, 3,
//! 17, 64, 65, 128, 256 and drawn, N and K drawn) and asynct-0.5b's five weight shapes at M = 1,
//! 8, 32, 64, 128, 512 on every path that serves them, fresh inputs, outputs poisoned with NaN,
//! every element, every row and the whole output within the bounds of `gpu_gemm/reference.rs`;
//! a skinny row with the same bits alone and at every M up to 64 beside any rows (NaN and inf
//! included) under every instantiation; the same past 64 rows (skinny slabs), through the WGMMA
//! kernel at M up to 2,100 and through cuBLASLt pinned at one reference M; two runs with the same
//! bits on both paths; a plan still launching after a smaller one of its entry point is loaded;
//! bad shapes and buffers refused by name; CUDA-graph replays with the eager bits on both paths; and each
//! fused epilogue of the skinny and the WGMMA kernel with the bits of that kernel's plain GEMM
//! followed by the op it replaces (`gpu_gemm/epilogue.rs`); the folded form with the bits of the
//! split-K attention's own finish followed by the plain GEMM (`gpu_gemm/fold.rs`).

#[path = "gpu_gemm/accuracy.rs"]
mod accuracy;
#[path = "gpu_gemm/bits.rs"]
mod bits;
#[path = "gpu_gemm/device.rs"]
mod device;
#[path = "gpu_gemm/epilogue.rs"]
mod epilogue;
#[path = "gpu_gemm/fold.rs"]
mod fold;
#[path = "gpu_gemm/reference.rs"]
mod reference;

fn main() {
    verify::gpu_harness::run(
        "gpu_gemm",
        &[
            ("sanitize_every_path_on_small_shapes", accuracy::sanitize_small_shapes),
            ("drawn_shapes_agree_with_f64_on_every_path", accuracy::drawn_shapes),
            ("asynct_0_5b_shapes_agree_with_f64_on_every_path", accuracy::model_shapes),
            ("a_skinny_row_has_the_same_bits_at_every_m_beside_any_rows", bits::batch_invariance),
            ("past_64_rows_and_pinned_cublaslt_rows_keep_their_bits", bits::wide_batch_invariance),
            ("two_runs_give_the_same_bits_on_both_paths", bits::two_runs),
            (
                "a_later_smaller_plan_leaves_an_earlier_one_its_shared_memory",
                bits::a_later_smaller_plan_leaves_an_earlier_one_its_shared_memory,
            ),
            ("bad_shapes_and_buffers_are_refused_by_name", bits::refusals),
            ("cuda_graph_replays_give_the_eager_bits_on_both_paths", bits::graph_replay),
            ("the_periln_epilogue_gives_the_gemm_then_peri_ln_residual_bits", epilogue::periln),
            ("the_silu_mul_epilogue_gives_the_gemm_then_silu_mul_bits", epilogue::silu_mul),
            (
                "the_qk_norm_rope_cache_epilogue_gives_the_gemm_then_qk_norm_rope_cache_bits",
                epilogue::qk_norm_rope_cache,
            ),
            ("run_with_refuses_a_mismatched_epilogue_and_bad_buffers_by_name", epilogue::refusals),
            ("the_folded_form_gives_the_finished_attention_then_gemm_bits", fold::folded_x),
        ],
    )
}
