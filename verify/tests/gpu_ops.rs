//! The small kernels of the GPU model (`gpu::ops`) held against the oracle, one check per op:
//! fresh seeded inputs, every output poisoned before the launch, every element compared (bounds
//! in `gpu_ops/compare.rs`), odd sizes, every UClipNorm shape, shuffled and padded cache slots,
//! and sampled tokens equal to `oracle::decode::sampler`'s; the elementwise passes' hardware
//! bf16 rounding against its integer definition on every f32 bit pattern; and the batch of the step
//! inputs' copies (one upload and one launch). Without a GPU every
//! check prints that it was skipped (`verify::gpu_harness`).

#[path = "gpu_ops/compare.rs"]
mod compare;
#[path = "gpu_ops/elementwise.rs"]
mod elementwise;
#[path = "gpu_ops/qk.rs"]
mod qk;
#[path = "gpu_ops/sampling.rs"]
mod sampling;
#[path = "gpu_ops/step_io.rs"]
mod step_io;

fn main() {
    verify::gpu_harness::run(
        "gpu_ops",
        &[
            (
                "bf16_rounding_matches_its_definition_on_every_f32",
                elementwise::bf16_rounding_matches_its_definition_on_every_f32,
            ),
            ("embedding_gathers_rows_bit_for_bit", elementwise::embedding_gathers_rows_bit_for_bit),
            ("silu_mul_matches_the_oracle", elementwise::silu_mul_matches_the_oracle),
            ("peri_ln_residual_rounds_like_the_oracle", elementwise::peri_ln_residual_rounds_like_the_oracle),
            (
                "embedding_norm_matches_the_oracle_in_every_shape",
                elementwise::embedding_norm_matches_the_oracle_in_every_shape,
            ),
            ("qk_norm_rope_cache_matches_the_oracle", qk::qk_norm_rope_cache_matches_the_oracle),
            (
                "qk_norm_rope_cache_masks_and_reports_bad_positions_and_slots",
                qk::qk_norm_rope_cache_masks_and_reports_bad_positions_and_slots,
            ),
            (
                "argmax_takes_the_lowest_id_of_the_largest_logit",
                sampling::argmax_takes_the_lowest_id_of_the_largest_logit,
            ),
            ("sampler_draws_the_oracles_tokens", sampling::sampler_draws_the_oracles_tokens),
            ("bad_logit_rows_are_reported_not_sampled", sampling::bad_logit_rows_are_reported_not_sampled),
            ("copy_lists_land_whole_batch_after_batch", step_io::copy_lists_land_whole_batch_after_batch),
            (
                "step_results_land_in_mapped_memory_and_clear_the_fault_word",
                step_io::step_results_land_in_mapped_memory_and_clear_the_fault_word,
            ),
        ],
    )
}
