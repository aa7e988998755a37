//! How the benchmark times a launch, shared by decode and prefill: CUDA events around `reps`
//! back-to-back launches, the median of `trials`, cycling through copies of the inputs whose
//! total exceeds twice the L2, by the same rule as `scripts/sdpa_anchor.py` (so neither side is
//! timed on inputs the other finds in L2).

use gpu::Gpu;

/// L2 of an H200 (60 MB): the input copies cycled through add up to twice this.
pub const L2_BYTES: usize = 60 << 20;
/// Most input copies (the anchor uses the same cap).
pub const MAX_COPIES: usize = 64;

/// Input copies to cycle through when one set is `bytes_per_set` bytes: the anchor's
/// `max(1, min(64, 2 * L2 // bytes + 1))`.
pub fn copies(bytes_per_set: usize) -> usize {
    (2 * L2_BYTES / bytes_per_set.max(1) + 1).clamp(1, MAX_COPIES)
}

/// Median over `trials` of the mean time (ms) of `reps` back-to-back calls of `launch(i)` (`i`
/// counts the calls, to pick the input copy), after three untimed calls.
pub fn median_ms(
    gpu: &Gpu,
    reps: usize,
    trials: usize,
    mut launch: impl FnMut(usize) -> gpu::Result<()>,
) -> Result<f64, String> {
    for i in 0..3 {
        launch(i).map_err(|x| x.to_string())?;
    }
    let mut times = Vec::with_capacity(trials.max(1));
    for _ in 0..trials.max(1) {
        let ms = gpu.time_ms(|| (0..reps.max(1)).try_for_each(&mut launch)).map_err(|x| x.to_string())?;
        times.push(ms / reps.max(1) as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_follow_the_anchors_rule() {
        // The anchor's prefill points: q, k, v of 16K tokens (67 MB) and of 8K tokens.
        let set = |tokens: usize| 2 * tokens * (8 + 2 * 4) * 128;
        assert_eq!(copies(set(16384)), 2);
        assert_eq!(copies(set(8192)), 4);
        assert_eq!(copies(1 << 40), 1);
        assert_eq!(copies(1024), MAX_COPIES);
        assert_eq!(copies(0), MAX_COPIES);
    }
}
