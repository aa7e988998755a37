//! The skinny kernel's staged forms (`gemm_skinny_staged.cuh`): at one slab of at most 8
//! rows, a CTA stages its rows of x in shared memory, with the first steps of its W block in
//! registers from before the wait, then multiplies as the plain form does, so a row gets the
//! plain form's bits.
//!
//! - [`GemmPlan::skinny_staged`]: x as it is, copied. With x out of the registers in flight a
//!   lane holds more steps of W, so a warp's steps take fewer batches of loads, each an L2 round
//!   trip after the wait: [`GemmPlan::decode_rows`] takes it where that is so (down_proj at
//!   K = 3,072: one batch instead of two).
//! - [`GemmPlan::skinny_fold`]: x the split-K attention's partials, which it adds itself with the
//!   additions and rounding of the attention's own finish. The attention then launches without
//!   its counters ([`crate::attention::Operands::leave_partials`]) and ends when its partials are
//!   written: at one decode row the fence, the count and the last CTA's loads of every chunk were
//!   a chain of L2 round trips on the step's path, ahead of the GEMM's own load of x. It reads
//!   every chunk's partials where the plain form reads one bf16 row, 2 x 9 times the bytes at 9
//!   chunks, and each of its CTAs reads all of them: [`FoldLayout::pays`] takes it only where one
//!   pass of loads covers them.
//!
//! `gpu_gemm` holds both to the plain form's bits (the folded one after the attention's finish),
//! so the choice is free to change with the batch.

use cudarc::driver::CudaView;

use super::plan::{
    grid, m_tile, EpilogueKind, GemmPath, GemmPlan, GemmShape, SkinnyForm, SkinnyTile, SHARED_X_MAX_BYTES,
    SKINNY_M_TILES, SKINNY_THREADS,
};
use crate::attention::CHUNK;
use crate::error::{unsupported, Result};

/// Chunks whose partials a thread of the folded form loads before its first addition (the
/// kernel's `FOLD_CHUNKS`): the chunks of a 1K-token row.
pub const FOLD_CHUNKS: usize = 9;

/// Elements of x each thread of the folded form adds up (one float4 of each chunk's partial).
const FOLD_ELEMENTS: usize = 4;

/// The layout of the split-K attention's partials, `[M, heads, max_chunks, head_dim]` f32 (the
/// attention plan's workspace), that a folded GEMM reads as its `[M, heads * head_dim]` x.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FoldLayout {
    /// Query heads.
    pub heads: usize,
    /// Elements of a head: a power of two, at least 4 (a thread's float4).
    pub head_dim: usize,
    /// Chunk slots per (row, head) in the workspace ([`crate::attention::Geometry::max_chunks`]).
    pub max_chunks: usize,
}

impl FoldLayout {
    /// The rounds of loads, each an L2 round trip, in which a thread of the folded form at `m`
    /// rows brings in its partials: its passes over the rows' elements (4 a thread a pass), times
    /// the rounds of at most [`FOLD_CHUNKS`] chunks a pass. Folding replaces the attention's
    /// count and finish, two round trips and a fence, and o_proj's load of x, a third: one round
    /// pays ([`FoldLayout::pays`]); whether two do is the device's to say (`ASYNCT_FOLD_O=2`).
    pub fn load_rounds(&self, m: usize) -> usize {
        let passes = (m * self.heads * self.head_dim).div_ceil(FOLD_ELEMENTS * SKINNY_THREADS as usize);
        passes * self.max_chunks.div_ceil(FOLD_CHUNKS)
    }

    /// Whether folding pays at `m` rows: one round of loads ([`FoldLayout::load_rounds`]).
    pub fn pays(&self, m: usize) -> bool {
        self.load_rounds(m) <= 1
    }
}

/// A folded GEMM's x on the device: the attention's partials and its rows' key counts.
pub struct FoldedX<'a> {
    /// `[M, heads, max_chunks, head_dim]` f32, 16-byte aligned: the chunks below
    /// `ceil(row_len / CHUNK)` of each row written.
    pub partial: CudaView<'a, f32>,
    /// `[M]` keys of each row. The folded kernel reads it before it waits on the kernel before
    /// it, so that kernel must not write it (the attention does not).
    pub row_len: CudaView<'a, i32>,
}

/// 16-byte W loads a lane of the staged form with x as it is holds in flight (the kernel's
/// `RowsX::W_VECTORS`): its steps a batch, over the lane's W vectors a step.
const ROWS_W_VECTORS: usize = 12;
/// The same for the plain form, whose x loads share the budget (the kernel's `Config::U`).
const PLAIN_VECTORS: usize = 16;

/// Batches of loads a warp of the skinny kernel at `rows` rows of W and one 8-row x tile takes
/// over K = `k`: its steps (one in 8 of K's 32-wide steps) over the steps a batch, in the plain
/// form (`staged` false) or the staged one with x as it is.
pub fn load_batches(k: usize, rows: usize, staged: bool) -> usize {
    let w_vectors = rows / 8;
    let per_batch = if staged { ROWS_W_VECTORS / w_vectors } else { PLAIN_VECTORS / (w_vectors + 1) };
    k.div_ceil(32).div_ceil(8).div_ceil(per_batch.max(1))
}

impl GemmPlan {
    /// The skinny kernel's staged form with x as it is, `rows` rows of W per CTA and `epilogue`,
    /// at most 8 rows: the plain form's grid, dynamic shared memory M K 2 bytes.
    pub fn skinny_staged(shape: GemmShape, rows: usize, epilogue: EpilogueKind) -> Result<Self> {
        let entry = "gemm skinny staged";
        let plain = Self::skinny_rows_epilogue(shape, rows, epilogue)?;
        let GemmPath::Skinny(tile) = plain.path else { unreachable!("skinny_rows_epilogue plans the skinny kernel") };
        staged_fits(entry, shape)?;
        let tile = SkinnyTile {
            form: SkinnyForm::Staged,
            entry: format!("gemm_skinny_staged_m8_r{rows}{}", epilogue.suffix()),
            shared_bytes: (shape.m * shape.k * 2) as u32,
            ..tile
        };
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }

    /// The skinny kernel's folded form with `epilogue` (Store or PeriLn, o_proj's), its x the
    /// partials of `layout` (K = heads * head_dim), at most 8 rows; the rows per CTA as
    /// [`GemmPlan::skinny_epilogue`] picks them for `sms` SMs.
    pub fn skinny_fold(shape: GemmShape, epilogue: EpilogueKind, layout: FoldLayout, sms: usize) -> Result<Self> {
        let entry = "gemm skinny folded";
        let bad = |why: String| Err(unsupported(entry, why));
        staged_fits(entry, shape)?;
        if !matches!(epilogue, EpilogueKind::Store | EpilogueKind::PeriLn) {
            return bad(format!("the Store and PeriLn epilogues only, got {epilogue:?}"));
        }
        let FoldLayout { heads, head_dim, max_chunks } = layout;
        if !head_dim.is_power_of_two() || head_dim < FOLD_ELEMENTS || !(1..=i32::MAX as usize).contains(&max_chunks) {
            return bad(format!("a power-of-two head_dim of 4 or more and chunks, got {head_dim} and {max_chunks}"));
        }
        if heads.checked_mul(head_dim) != Some(shape.k) {
            return bad(format!("K = heads * head_dim, got {} for {heads} x {head_dim}", shape.k));
        }
        // The rows per CTA of the plain form at this shape: the same grid.
        let rows = match Self::skinny_epilogue(shape, sms, epilogue)?.path {
            GemmPath::Skinny(plain) => plain.rows,
            _ => unreachable!("skinny_epilogue plans the skinny kernel"),
        };
        let tile = SkinnyTile {
            form: SkinnyForm::Folded(layout),
            entry: format!("gemm_skinny_fold_m8_r{rows}{}", epilogue.suffix()),
            m_tile: SKINNY_M_TILES[0],
            rows,
            slabs: 1,
            grid: grid(entry, shape, Some(shape.n.div_ceil(rows)))?,
            shared_bytes: (shape.m * shape.k * 2) as u32,
        };
        Ok(Self { shape, path: GemmPath::Skinny(tile), epilogue })
    }
}

/// Refuses a shape the staged forms do not take: more than one slab of 8 rows, or rows of x
/// past shared memory (beside the largest partial sums, 8 warps of 8 x 68 floats).
fn staged_fits(entry: &str, shape: GemmShape) -> Result<()> {
    if m_tile(shape)? != SKINNY_M_TILES[0] {
        return Err(unsupported(entry, format!("one slab of at most 8 rows, got M = {}", shape.m)));
    }
    if shape.m * shape.k > i32::MAX as usize || shape.m * shape.k * 2 + 8 * 8 * (64 + 4) * 4 > SHARED_X_MAX_BYTES {
        return Err(unsupported(entry, format!("{shape}: its rows of x must fit shared memory")));
    }
    Ok(())
}

/// The folded kernel's layout arguments after its partials: log2 of `head_dim`, the chunk slots
/// and the keys a chunk.
pub(super) fn layout_args(layout: &FoldLayout) -> (i32, i32, i32) {
    // skinny_fold checked head_dim a power of two and K (heads * head_dim) within an int.
    let int = |v: usize| i32::try_from(v).expect("a checked fold dimension fits an int");
    (layout.head_dim.trailing_zeros() as i32, int(layout.max_chunks), CHUNK as i32)
}

/// Checks `x` against a folded plan's shape and layout.
pub(super) fn check(entry: &str, shape: GemmShape, layout: &FoldLayout, x: &FoldedX<'_>) -> Result<()> {
    let partials = shape.m * layout.heads * layout.max_chunks * layout.head_dim;
    if x.partial.len() < partials {
        let why = format!("`partial` holds {} f32s, [M, heads, chunks, D] of {shape} is {partials}", x.partial.len());
        return Err(unsupported(entry, why));
    }
    if x.row_len.len() < shape.m {
        return Err(unsupported(entry, format!("`row_len` holds {} rows, M is {}", x.row_len.len(), shape.m)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gemm::plan::tests::skinny as tile;

    const O_PROJ: FoldLayout = FoldLayout { heads: 8, head_dim: 128, max_chunks: 9 };

    #[test]
    fn a_folded_plan_takes_the_plain_forms_grid_and_stages_its_rows_of_x() {
        for (m, n, sms) in [(1, 1024, 132), (8, 1024, 132), (3, 4096, 16), (1, 64, 1)] {
            let shape = GemmShape { m, n, k: 1024 };
            for kind in [EpilogueKind::Store, EpilogueKind::PeriLn] {
                let folded = GemmPlan::skinny_fold(shape, kind, O_PROJ, sms).unwrap();
                let plain = GemmPlan::skinny_epilogue(shape, sms, kind).unwrap();
                let (f, p) = (tile(&folded), tile(&plain));
                assert_eq!((f.rows, f.grid, f.slabs), (p.rows, p.grid, 1), "{shape} {kind:?}");
                assert_eq!(f.entry, format!("gemm_skinny_fold_m8_r{}{}", p.rows, kind.suffix()));
                assert_eq!(f.form, SkinnyForm::Folded(O_PROJ));
                assert_eq!(f.shared_bytes as usize, m * 1024 * 2);
                assert_eq!(folded.epilogue, kind);
                assert!(folded.name().starts_with("skinny-fold-m8-r"), "{}", folded.name());
            }
        }
    }

    #[test]
    fn a_folded_plan_refuses_what_its_kernel_does_not_take_by_name() {
        let shape = GemmShape { m: 1, n: 1024, k: 1024 };
        let refused = |shape: GemmShape, kind: EpilogueKind, layout: FoldLayout| {
            GemmPlan::skinny_fold(shape, kind, layout, 132).unwrap_err().to_string()
        };
        for (got, needle) in [
            (refused(GemmShape { m: 9, ..shape }, EpilogueKind::Store, O_PROJ), "at most 8 rows, got M = 9"),
            (refused(shape, EpilogueKind::SiluMul, O_PROJ), "got SiluMul"),
            (refused(shape, EpilogueKind::PeriLn, FoldLayout { head_dim: 96, heads: 10, ..O_PROJ }), "got 96"),
            (refused(shape, EpilogueKind::PeriLn, FoldLayout { max_chunks: 0, ..O_PROJ }), "and 0"),
            (refused(shape, EpilogueKind::PeriLn, FoldLayout { heads: 4, ..O_PROJ }), "got 1024 for 4 x 128"),
            (
                refused(
                    GemmShape { m: 8, n: 64, k: 1 << 14 },
                    EpilogueKind::Store,
                    FoldLayout { heads: 128, ..O_PROJ },
                ),
                "fit shared memory",
            ),
        ] {
            assert!(got.contains(needle) && got.contains("gemm skinny folded"), "expected `{needle}` in: {got}");
        }
    }

    #[test]
    fn decode_rows_stage_x_where_a_warp_then_takes_its_steps_in_fewer_batches() {
        // down_proj: 12 steps a warp at K = 3,072, 8 a batch in the plain form at 8 rows of W and
        // 12 staged; o_proj, qkv and gate/up at K = 1,024: 4 steps, one batch either way.
        assert_eq!((load_batches(3072, 8, false), load_batches(3072, 8, true)), (2, 1));
        assert_eq!((load_batches(1024, 8, false), load_batches(1024, 8, true)), (1, 1));
        assert_eq!((load_batches(1024, 32, false), load_batches(1024, 32, true)), (2, 2));
        assert_eq!((load_batches(8, 64, false), load_batches(8, 64, true)), (1, 1));
        let pick = |m, n, k, kind| GemmPlan::decode_rows(GemmShape { m, n, k }, 132, kind, true).unwrap();
        for m in 1..=8 {
            let down = pick(m, 1024, 3072, EpilogueKind::PeriLn);
            assert_eq!(tile(&down).form, SkinnyForm::Staged, "M {m}");
            assert_eq!(down.name(), "skinny-staged-m8-r8-periln");
            assert_eq!(
                tile(&down).grid,
                tile(&GemmPlan::skinny_epilogue(down.shape, 132, down.epilogue).unwrap()).grid
            );
            for (n, k, kind) in [(1024, 1024, EpilogueKind::PeriLn), (2048, 1024, EpilogueKind::QkNormRopeCache)] {
                assert_eq!(tile(&pick(m, n, k, kind)).form, SkinnyForm::Plain, "M {m} N {n}");
            }
        }
        assert_eq!(tile(&pick(9, 1024, 3072, EpilogueKind::PeriLn)).form, SkinnyForm::Classes);
        assert_eq!(tile(&pick(9, 1024, 1024, EpilogueKind::PeriLn)).form, SkinnyForm::Classes);
    }

    #[test]
    fn a_staged_plan_takes_the_plain_forms_rows_and_refuses_what_they_refuse() {
        let shape = GemmShape { m: 3, n: 1024, k: 3072 };
        let staged = GemmPlan::skinny_staged(shape, 16, EpilogueKind::SiluMul).unwrap();
        let t = tile(&staged);
        assert_eq!(
            (t.entry.as_str(), t.rows, t.grid, t.shared_bytes),
            ("gemm_skinny_staged_m8_r16_silu_mul", 16, 64, 3 * 3072 * 2)
        );
        for (shape, rows, kind, needle) in [
            (GemmShape { m: 9, ..shape }, 16, EpilogueKind::Store, "at most 8 rows, got M = 9"),
            (shape, 8, EpilogueKind::SiluMul, "got 8"),
            (GemmShape { m: 8, n: 64, k: 1 << 14 }, 8, EpilogueKind::Store, "fit shared memory"),
        ] {
            let got = GemmPlan::skinny_staged(shape, rows, kind).unwrap_err().to_string();
            assert!(got.contains(needle), "expected `{needle}` in: {got}");
        }
    }

    #[test]
    fn folding_pays_where_one_pass_of_loads_covers_every_chunk() {
        assert!(O_PROJ.pays(1), "one row of the 1K bucket's 9 chunks");
        assert!(!O_PROJ.pays(2), "two rows take two passes");
        assert!(!FoldLayout { max_chunks: 10, ..O_PROJ }.pays(1));
        assert!(!FoldLayout { max_chunks: 33, ..O_PROJ }.pays(1), "the 4K bucket");
        // Narrower rows share a pass: 4 rows of 256 elements are 1,024, one float4 a thread.
        let narrow = FoldLayout { heads: 4, head_dim: 64, max_chunks: 9 };
        assert!(narrow.pays(4) && !narrow.pays(5));
        assert_eq!([1, 2, 3, 8].map(|m| O_PROJ.load_rounds(m)), [1, 2, 3, 8]);
        assert_eq!(FoldLayout { max_chunks: 33, ..O_PROJ }.load_rounds(1), 4);
    }
}
