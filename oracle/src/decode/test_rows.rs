//! Logits rows for the property tests of the sampler and the logprobs: values from a coarse grid
//! (ties everywhere, so tie rules are exercised), a spread range, masked tokens (`-inf`) and `-0.0`
//! (which must rank with `+0.0`).

use std::ops::Range;

use proptest::prelude::*;

/// Rows of `len` logits: half from `grid` (steps of `step`), half from `spread`, with `-inf` and
/// `-0.0` among them.
pub fn rows(grid: Range<i32>, step: f32, spread: Range<f32>, len: Range<usize>) -> impl Strategy<Value = Vec<f32>> {
    let value = prop_oneof![
        4 => grid.prop_map(move |x| x as f32 * step),
        4 => spread,
        1 => Just(f32::NEG_INFINITY),
        1 => Just(-0.0f32),
    ];
    proptest::collection::vec(value, len)
}
