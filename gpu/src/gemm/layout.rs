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
//!
//! **Class steps** (a column order, not a row order): the skinny kernel's wide form
//! (`gemm_skinny_wide.cu`) reads W as the wgmma's shared-memory B operand, copied by the TMA as
//! it is stored, while x, its register A operand, is loaded as every skinny form loads it. Each
//! instruction's slot `j` must hold the same `k` in both, so within each step of
//! [`CLASS_STEP`] columns a weight read by that form has its columns reordered
//! ([`class_step_source`], [`to_class_steps`]): a copy of the weight beside the one the other
//! forms read.

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

/// Columns of one step of the skinny kernel's sums (its `STEP_K`): the class-step order permutes
/// columns within each such step.
pub const CLASS_STEP: usize = 32;

/// The column of W (within its step of [`CLASS_STEP`]) that column `col` of the class-step layout
/// holds. Position `16 i + j` is slot `j` of the step's instruction `i` (0: the even 4-element
/// quads, 1: the odd ones), and slot `j` of the m16n8k16 A fragment that lane `t` fills from its
/// 16 bytes at `8 t` is `2 t, 2 t + 1` for `k = 8 t, 8 t + 1` and `2 t + 8, 2 t + 9` for
/// `8 t + 2, 8 t + 3` (plus 4 in the odd instruction).
pub fn class_step_source(col: usize) -> usize {
    let (step, p) = (col - col % CLASS_STEP, col % CLASS_STEP);
    let (instruction, slot) = (p / 16, p % 16);
    step + 8 * (slot % 8 / 2) + slot % 2 + 2 * (slot / 8) + 4 * instruction
}

/// `w` (row-major, `k` columns, `k` a multiple of [`CLASS_STEP`]) with each row's columns in the
/// class-step order.
pub fn to_class_steps<T: Copy>(w: &[T], k: usize) -> Vec<T> {
    assert!(k.is_multiple_of(CLASS_STEP) && w.len().is_multiple_of(k), "{} elements in rows of {k}", w.len());
    w.chunks_exact(k).flat_map(|row| (0..k).map(|c| row[class_step_source(c)])).collect()
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
    fn class_steps_put_each_instructions_quads_in_its_slots() {
        let order: Vec<usize> = (0..32).map(class_step_source).collect();
        let even = [0, 1, 8, 9, 16, 17, 24, 25, 2, 3, 10, 11, 18, 19, 26, 27];
        assert_eq!(order[..16], even);
        assert_eq!(order[16..], even.map(|k| k + 4));
        // Lane t's 16 bytes at 8 t: slots 2t, 2t + 1 hold k 8t, 8t + 1 and slots 2t + 8, 2t + 9
        // hold 8t + 2, 8t + 3 (the odd instruction's, 8t + 4 ..).
        for t in 0..4 {
            for (slot, k) in [(2 * t, 8 * t), (2 * t + 1, 8 * t + 1), (2 * t + 8, 8 * t + 2), (2 * t + 9, 8 * t + 3)] {
                assert_eq!((order[slot], order[16 + slot]), (k, k + 4));
            }
        }
        assert_eq!(class_step_source(64 + 9), 64 + 3, "each step its own columns");
        let w: Vec<usize> = (0..128).collect();
        let permuted = to_class_steps(&w, 64);
        assert_eq!(permuted[64..], (0..64).map(|c| 64 + class_step_source(c)).collect::<Vec<_>>()[..]);
        let mut sorted = permuted.clone();
        sorted.sort();
        assert_eq!(sorted, w, "a permutation");
    }

    #[test]
    fn permuting_moves_whole_rows() {
        let rows: Vec<u32> = (0..6).collect();
        assert_eq!(permute_rows(&rows, 2, |r| 2 - r), vec![4, 5, 2, 3, 0, 1]);
        assert_eq!(permute_rows(&rows, 1, |r| (r + 1) % 6), vec![1, 2, 3, 4, 5, 0]);
    }
}
