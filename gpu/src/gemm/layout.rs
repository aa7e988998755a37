//! The row orders of the fused weights whose GEMM epilogues pair outputs: the one place that
//! defines them. The model uploads its weights in these orders (`model::gpu_backend::weights`);
//! the skinny kernel's epilogues and the standalone kernels that read these GEMMs' outputs for
//! prefill rows (`silu_mul.cu`, `qk_norm_rope_cache.cu`; each refers here) read them.
//!
//! Why: an epilogue that needs two outputs of one x row together (a channel's gate and up, the
//! two channels of a RoPE pair) finds them in one CTA of the skinny kernel only if their rows of
//! W sit in one 16-row mma tile, 8 apart. A GEMM's output columns follow W's rows, so the layout
//! of the output is the layout of the weight.
//!
//! **Interleaved halves** of a block of `width` rows (`width` a multiple of 16): the block's
//! first half A and second half B alternate in groups of [`GROUP`] rows, device row `16 i + j` is
//! A's row `8 i + j` and device row `16 i + 8 + j` is B's row `8 i + j`, for `j < 8`.
//! - gate/up, `[2 I, hidden]`: one block of `2 I` rows, A = `gate_proj`, B = `up_proj`
//!   ([`gate_up_source`]).
//! - qkv, `[(Hq + 2 Hkv) D, hidden]`: `q_proj`, `k_proj`, `v_proj` stacked (q heads, then k
//!   heads, then v heads, `D` rows each), and each q and k head one block of `D` rows, A its
//!   channels `0..D/2` and B `D/2..D`, so channel `j` and its RoPE partner `j + D/2` are rows 8
//!   apart; v heads keep their rows ([`qkv_source`]). `D` is a multiple of 16, so no 16-row tile
//!   straddles two heads.

use crate::ops::HeadShape;

/// Rows of one half that stay together in an interleaved block: 8, the row distance between the
/// two halves of a 16-row mma tile.
pub const GROUP: usize = 8;

/// The row of the stacked block (A then B) that device row `row` of an interleaved block of
/// `width` rows holds.
pub fn interleaved_source(row: usize, width: usize) -> usize {
    debug_assert!(width.is_multiple_of(2 * GROUP) && row < width, "row {row} of an interleaved block of {width}");
    let (i, j) = (row / (2 * GROUP), row % (2 * GROUP));
    if j < GROUP {
        i * GROUP + j
    } else {
        width / 2 + i * GROUP + j - GROUP
    }
}

/// The row of the stacked `[gate_proj; up_proj]` (`2 I` rows) that device row `row` of the
/// gate/up weight holds.
pub fn gate_up_source(row: usize, intermediate: usize) -> usize {
    interleaved_source(row, 2 * intermediate)
}

/// The row of the stacked `[q_proj; k_proj; v_proj]` that device row `row` of the qkv weight of
/// `heads` holds.
pub fn qkv_source(row: usize, heads: HeadShape) -> usize {
    let d = heads.head_dim;
    if row >= (heads.num_heads + heads.num_kv_heads) * d {
        row
    } else {
        row - row % d + interleaved_source(row % d, d)
    }
}

/// `rows` (row-major, each `k` elements) reordered so that row `r` of the result is row
/// `source(r)` of `rows`. With `k = 1` it reorders the columns of one row of a GEMM's output.
pub fn permute_rows<T: Copy>(rows: &[T], k: usize, source: impl Fn(usize) -> usize) -> Vec<T> {
    let n = rows.len() / k;
    (0..n).flat_map(|r| rows[source(r) * k..][..k].iter().copied()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_alternates_groups_of_eight_from_each_half() {
        let order: Vec<usize> = (0..64).map(|r| interleaved_source(r, 64)).collect();
        let want: Vec<usize> = [0, 32, 8, 40, 16, 48, 24, 56].iter().flat_map(|&s| s..s + 8).collect();
        assert_eq!(order, want);
    }

    #[test]
    fn gate_and_up_of_a_channel_sit_8_rows_apart_in_one_16_row_tile() {
        let inter = 48;
        let mut seen = vec![false; 2 * inter];
        for row in 0..2 * inter {
            let src = gate_up_source(row, inter);
            assert!(!std::mem::replace(&mut seen[src], true), "row {src} placed twice");
            if row % 16 < 8 {
                assert!(src < inter, "device row {row} should hold a gate row, holds {src}");
                assert_eq!(gate_up_source(row + 8, inter), src + inter, "the up of gate {src}");
            }
        }
    }

    #[test]
    fn each_rope_pair_of_a_q_or_k_head_sits_8_rows_apart_and_v_heads_stay() {
        let heads = HeadShape { num_heads: 4, num_kv_heads: 2, head_dim: 32 };
        let (d, half) = (32, 16);
        let qk_rows = 6 * d;
        let mut seen = vec![false; heads.qkv_width()];
        for row in 0..heads.qkv_width() {
            let src = qkv_source(row, heads);
            assert!(!std::mem::replace(&mut seen[src], true), "row {src} placed twice");
            assert_eq!(src / d, row / d, "row {row} left its head");
            if row >= qk_rows {
                assert_eq!(src, row, "v rows keep their place");
            } else if row % 16 < 8 {
                assert!(src % d < half, "device row {row} should hold a first-half channel, holds {src}");
                assert_eq!(qkv_source(row + 8, heads), src + half, "the RoPE partner of {src}");
            }
        }
        // Head 1 (a q head), its channels 8..16 and 24..32 (D/2 + 8..16) in its second 16-row tile.
        assert_eq!(
            (16..32).map(|r| qkv_source(d + r, heads) - d).collect::<Vec<_>>(),
            [8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31]
        );
    }

    #[test]
    fn permuting_moves_whole_rows() {
        let rows: Vec<u32> = (0..6).collect();
        assert_eq!(permute_rows(&rows, 2, |r| 2 - r), vec![4, 5, 2, 3, 0, 1]);
        assert_eq!(permute_rows(&rows, 1, |r| (r + 1) % 6), vec![1, 2, 3, 4, 5, 0]);
    }
}
