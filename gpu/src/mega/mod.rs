//! The persistent decode megakernel (`decode_mega.cu`, issue 15): the decoder layers of a small
//! decode step in one launch.
//!
//! The host side is two halves, as elsewhere in the crate. [`MegaOp`] (this file, pure host code
//! tested on the CPU) is one op of the step: a GEMM or an attention launch that was planned and
//! checked as usual, then *recorded* instead of launched ([`crate::gemm::Gemm::record_with`],
//! [`crate::attention::Hp1Attention::record`]): its kind, its task count (the CTAs the standalone
//! launch would have had, which fixes what each task computes) and the standalone entry's
//! argument slots. [`encode`] lays the ops out as the kernel's descriptor table. [`DecodeMega`]
//! (in [`launch`]) loads the entry for a batch tile and head dim, uploads a table and launches.
//!
//! A task runs the standalone kernel's CTA body with that CTA's index, so every output keeps the
//! bits of the graph path (the kernel header says why); `gpu_engine` and `gpu_model` check it.

pub mod launch;

pub use launch::{DecodeMega, MegaTable};

use crate::attention::{AttentionPath, Plan, Pv};
use crate::error::{Error, Result};
use crate::gemm::{EpilogueKind, GemmShape};

/// 8-byte slots per descriptor (`mega::SLOTS` in `decode_mega.cu`).
pub const SLOTS: usize = 40;
/// Slots before the arguments: the kind, the task count.
const HEADER: usize = 2;
/// W rows per task of the Store and Peri-LN GEMMs (`ROWS_PLAIN`).
pub const ROWS_PLAIN: usize = 8;
/// W rows per task of the pairing epilogues, SiLU-mul and q/k norm + RoPE (`ROWS_PAIRED`).
pub const ROWS_PAIRED: usize = 16;
/// Rows of x per batch tile the megakernel is instantiated for (`decode_mega_m{8 MT}_d{D}`).
pub const ROW_TILES: [usize; 2] = [8, 32];
/// Head dims it is instantiated for.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// What a descriptor runs (the kernel's kind numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum MegaKind {
    /// The skinny GEMM storing `y`.
    GemmStore = 0,
    /// The skinny GEMM with the Peri-LN residual epilogue.
    GemmPeriLn = 1,
    /// The skinny GEMM with the SiLU-mul epilogue.
    GemmSiluMul = 2,
    /// The skinny GEMM with the q/k norm + RoPE + cache-write epilogue.
    GemmQkNormRopeCache = 3,
    /// The decode attention kernel's body.
    AttnDecode = 4,
    /// The split-K attention kernel's body.
    AttnSplit = 5,
}

/// One op of the megakernel's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MegaOp {
    /// What it runs.
    pub kind: MegaKind,
    /// Its tasks: W blocks of a GEMM, CTAs of the attention's grid.
    pub tasks: u64,
    /// Rows of x (a GEMM's `M`) or query rows (the attention's).
    pub rows: usize,
    /// The attention's head dim; `None` for a GEMM.
    pub head_dim: Option<usize>,
    /// The standalone entry's argument slots, in its parameter order.
    pub args: Vec<u64>,
}

impl MegaOp {
    /// A skinny GEMM of `shape` with `epilogue`, recorded as `args` (GEMM_SKINNY_ENTRY's).
    pub fn gemm(epilogue: EpilogueKind, shape: GemmShape, args: Vec<u64>) -> Result<Self> {
        let (kind, rows) = match epilogue {
            EpilogueKind::Store => (MegaKind::GemmStore, ROWS_PLAIN),
            EpilogueKind::PeriLn => (MegaKind::GemmPeriLn, ROWS_PLAIN),
            EpilogueKind::SiluMul => (MegaKind::GemmSiluMul, ROWS_PAIRED),
            EpilogueKind::QkNormRopeCache => (MegaKind::GemmQkNormRopeCache, ROWS_PAIRED),
        };
        // One slab of x per task: the megakernel's tile covers every row (checked at upload).
        let op = Self { kind, tasks: shape.n.div_ceil(rows) as u64, rows: shape.m, head_dim: None, args };
        op.check_args()?;
        Ok(op)
    }

    /// The attention launch of `plan`, recorded as `args` (HP1_ATTENTION_PARAMS and the rest of
    /// the decode or split entry's). The megakernel runs the sparse body with one head and groups
    /// of 8 lanes per task, one QK round at a time, whatever `plan`'s form: the same bits
    /// (`hp1_attention.cuh`).
    pub fn attention(plan: &Plan, args: Vec<u64>) -> Result<Self> {
        let g = plan.geometry;
        if plan.path.pv() != Pv::Sparse {
            return Err(refuse(format!("the megakernel runs sparse PV only, the plan is {}", plan.path.name())));
        }
        let (kind, chunks) = match plan.path {
            AttentionPath::Decode(_) => (MegaKind::AttnDecode, 1),
            AttentionPath::SplitK(_) => (MegaKind::AttnSplit, g.max_chunks()),
        };
        let tasks = g.rows.checked_mul(g.num_heads).and_then(|n| n.checked_mul(chunks));
        let tasks = tasks.ok_or_else(|| refuse(format!("the attention of {g:?} has too many tasks")))? as u64;
        let op = Self { kind, tasks, rows: g.rows, head_dim: Some(g.head_dim), args };
        op.check_args()?;
        Ok(op)
    }

    fn check_args(&self) -> Result<()> {
        if self.args.len() > SLOTS - HEADER {
            return Err(refuse(format!(
                "a {:?} op has {} argument slots, a descriptor holds {}",
                self.kind,
                self.args.len(),
                SLOTS - HEADER
            )));
        }
        Ok(())
    }
}

/// The descriptor table of `ops`: op `i` at `SLOTS * i`, its kind, its task count, its
/// arguments, zeros after them.
pub fn encode(ops: &[MegaOp]) -> Vec<u64> {
    let mut table = vec![0u64; ops.len() * SLOTS];
    for (op, slot) in ops.iter().zip(table.chunks_exact_mut(SLOTS)) {
        slot[0] = op.kind as u64;
        slot[1] = op.tasks;
        slot[HEADER..HEADER + op.args.len()].copy_from_slice(&op.args);
    }
    table
}

/// The row tile of the entry that serves `rows` rows of x: the narrowest of [`ROW_TILES`].
pub fn row_tile(rows: usize) -> Option<usize> {
    ROW_TILES.iter().copied().find(|&t| rows >= 1 && rows <= t)
}

fn refuse(reason: String) -> Error {
    Error::Unsupported { entry: "decode megakernel".to_string(), reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::plan::tests::geometry;
    use crate::attention::{Form, GroupSize, CHUNK};

    #[test]
    fn a_gemm_has_one_task_per_w_block_of_its_epilogues_rows() {
        let shape = |n| GemmShape { m: 1, n, k: 1024 };
        let op = |e, n| MegaOp::gemm(e, shape(n), vec![]).unwrap();
        // asynct-0.5b's layer: qkv, o, gate/up, down.
        assert_eq!(op(EpilogueKind::QkNormRopeCache, 2048).tasks, 128);
        assert_eq!(op(EpilogueKind::PeriLn, 1024).tasks, 128);
        assert_eq!(op(EpilogueKind::SiluMul, 6144).tasks, 384);
        assert_eq!(op(EpilogueKind::Store, 1001).tasks, 126);
        assert_eq!(op(EpilogueKind::SiluMul, 6144).kind, MegaKind::GemmSiluMul);
    }

    #[test]
    fn an_attention_has_the_tasks_of_its_plans_grid_with_one_head_a_task() {
        let split = Plan::auto(geometry(1, 1024)).unwrap();
        assert!(matches!(split.path, AttentionPath::SplitK(Pv::Sparse)));
        let op = MegaOp::attention(&split, vec![1, 2, 3]).unwrap();
        let chunks = 1024usize.div_ceil(CHUNK);
        assert_eq!((op.kind, op.tasks as usize, op.rows, op.head_dim), (MegaKind::AttnSplit, 8 * chunks, 1, Some(128)));
        // A plan of two heads a CTA still gives one task per head.
        let paired = Plan::with_form(geometry(4, 1024), split.path, Form::PAIRED).unwrap();
        assert_eq!(MegaOp::attention(&paired, vec![]).unwrap().tasks as usize, 4 * 8 * chunks);
        let short = Plan::auto(geometry(2, 100)).unwrap();
        let op = MegaOp::attention(&short, vec![]).unwrap();
        assert_eq!((op.kind, op.tasks), (MegaKind::AttnDecode, 2 * 8));
        let dense = Plan::new(geometry(1, 1024), AttentionPath::SplitK(Pv::Dense), GroupSize::Eight).unwrap();
        let err = MegaOp::attention(&dense, vec![]).unwrap_err().to_string();
        assert!(err.contains("sparse PV only"), "{err}");
    }

    #[test]
    fn the_table_holds_each_op_at_its_stride_with_kind_tasks_and_arguments() {
        let a = MegaOp::gemm(EpilogueKind::PeriLn, GemmShape { m: 2, n: 1024, k: 64 }, vec![7, 8, 9]).unwrap();
        let b = MegaOp::attention(&Plan::auto(geometry(1, 1024)).unwrap(), vec![5; 22]).unwrap();
        let table = encode(&[a, b]);
        assert_eq!(table.len(), 2 * SLOTS);
        assert_eq!(&table[..6], &[1, 128, 7, 8, 9, 0]);
        assert!(table[5..SLOTS].iter().all(|&s| s == 0));
        let tasks = 8 * 1024usize.div_ceil(CHUNK) as u64;
        assert_eq!(&table[SLOTS..SLOTS + 3], &[5, tasks, 5]);
        assert_eq!(table[SLOTS + 2 + 21], 5);
        assert_eq!(table[SLOTS + 2 + 22], 0);
    }

    #[test]
    fn too_many_arguments_are_refused_and_rows_find_their_tile() {
        let err = MegaOp::gemm(EpilogueKind::Store, GemmShape { m: 1, n: 8, k: 8 }, vec![0; 39]).unwrap_err();
        assert!(err.to_string().contains("39 argument slots, a descriptor holds 38"), "{err}");
        assert_eq!(row_tile(1), Some(8));
        assert_eq!(row_tile(8), Some(8));
        assert_eq!(row_tile(9), Some(32));
        assert_eq!(row_tile(32), Some(32));
        assert_eq!(row_tile(33), None);
        assert_eq!(row_tile(0), None);
    }
}
