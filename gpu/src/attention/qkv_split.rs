//! The qkv GEMM and the split-K attention of one decode row in one launch
//! (`hp1_qkv_split.cu`, sm_90): its plan, pure host code tested on the CPU, and its launch.
//!
//! At one decode row a layer is a chain of launches each held by latency, and every hand-off
//! from a kernel to the next costs about 1.2 us (`verify/RESULTS.md`, runs 280 and 291-292).
//! Here a cluster of [`QKV_SPLIT_CLUSTER`] CTAs a KV head computes that head's rows of the qkv
//! GEMM (with the q/k norm, RoPE and cache write of its epilogue), then, past a cluster barrier,
//! the split-K attention of the head's queries, leaving each chunk's partials for o_proj's folded
//! GEMM ([`crate::gemm::FoldedX`]). Each CTA copies its W rows into shared memory before it waits
//! on the kernel before it. The outputs have the bits of the skinny GEMM's qkv entries followed
//! by the split-K kernel launched without counters (the kernel header says why), so a row's
//! result does not depend on whether its step took this launch.
//!
//! The plan takes a split-K [`Plan`] of one row and the GEMM's K, and refuses what the kernel
//! does not serve: more rows, the decode path, KV heads whose rows do not split over the
//! cluster's CTAs in runs of one head ([`QKV_SPLIT_ENTRIES`]), a K that is not a multiple of 8,
//! or W rows past [`QKV_SPLIT_MAX_SHARED`]. [`QkvSplitPlan::pays`] says where it should run: a row of the
//! plan's capacity gives each half of a CTA (one split-K CTA's work) at most two chunk tasks.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaStream, CudaView, LaunchConfig};
use half::bf16;

use super::plan::{AttentionPath, Plan, Pv};
use crate::error::{unsupported, Result};
use crate::gemm::{Epilogue, EpilogueKind, GemmShape};
use crate::kernels::HP1_QKV_SPLIT;
use crate::runtime::{check_aligned, launch_error, Gpu, Launch};

/// CTAs of a cluster, one cluster a KV head.
pub const QKV_SPLIT_CLUSTER: usize = 8;
/// The instantiated (head dim, rows of W a CTA): `(Hq / Hkv + 2) D / 8` rows at 2 and 6 query
/// heads a KV head, where a CTA's rows lie in one head.
pub const QKV_SPLIT_ENTRIES: [(usize, usize); 5] = [(64, 32), (64, 64), (128, 64), (128, 128), (256, 128)];
/// Threads a CTA: two attention CTAs' worth, one skinny GEMM CTA.
pub const QKV_SPLIT_THREADS: u32 = 256;
/// The most dynamic shared memory a plan takes: an sm_90 CTA's 227 KB less room for the static
/// two `hp1::Shared<1>` (about 12 KB).
pub const QKV_SPLIT_MAX_SHARED: usize = 212 * 1024;
/// Chunk tasks a half CTA runs at most where the launch pays ([`QkvSplitPlan::pays`]).
pub const QKV_SPLIT_MAX_TASKS: usize = 2;

/// A launch of `hp1_qkv_split.cu`, from static facts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QkvSplitPlan {
    /// The split-K plan of one row whose work the launch does.
    pub attention: Plan,
    /// The qkv GEMM's shape: one row, `(Hq + 2 Hkv) D` outputs, `K` the hidden size.
    pub shape: GemmShape,
    /// The entry point.
    pub entry: String,
    /// CTAs: `Hkv` clusters.
    pub grid: u32,
    /// Dynamic shared memory a CTA.
    pub shared_bytes: u32,
}

impl QkvSplitPlan {
    /// The launch that does `attention`'s work (a split-K plan of one row) after the qkv GEMM of
    /// its row over `k` inputs.
    pub fn new(attention: Plan, k: usize) -> Result<Self> {
        let g = attention.geometry;
        let entry = |rows: usize, pv: &str| format!("hp1_qkv_split_d{}_r{rows}_{pv}", g.head_dim);
        let refuse = |reason: String| Err(unsupported("hp1_qkv_split", reason));
        let pv = match attention.path {
            AttentionPath::SplitK(Pv::Sparse) => "sparse",
            AttentionPath::SplitK(Pv::Dense) => "dense",
            AttentionPath::Decode(_) => {
                return refuse("it runs the split-K kernel's work, not the decode kernel's".into())
            }
        };
        if g.rows != 1 {
            return refuse(format!("it serves one decode row, not {}", g.rows));
        }
        let head_rows = (g.num_heads / g.num_kv_heads + 2) * g.head_dim;
        let rows = head_rows / QKV_SPLIT_CLUSTER;
        if !QKV_SPLIT_ENTRIES.contains(&(g.head_dim, rows)) || rows * QKV_SPLIT_CLUSTER != head_rows {
            return refuse(format!(
                "a KV head's {head_rows} qkv rows at D = {} do not make {QKV_SPLIT_CLUSTER} CTAs of one of {:?} \
                 (head dim, rows)",
                g.head_dim, QKV_SPLIT_ENTRIES
            ));
        }
        if k == 0 || !k.is_multiple_of(8) {
            return refuse(format!("K must be a positive multiple of 8, got {k}"));
        }
        // W's rows, x, the partial sums of 8 warps x 8 rows x (rows + 4).
        let shared = rows * shared_stride(k) * 2 + k * 2 + 8 * 8 * (rows + 4) * 4;
        if shared > QKV_SPLIT_MAX_SHARED {
            return refuse(format!(
                "{rows} rows of W at K = {k} take {shared} bytes of shared memory, past {QKV_SPLIT_MAX_SHARED}"
            ));
        }
        let n = (g.num_heads + 2 * g.num_kv_heads) * g.head_dim;
        Ok(Self {
            entry: entry(rows, pv),
            shape: GemmShape { m: 1, n, k },
            grid: (g.num_kv_heads * QKV_SPLIT_CLUSTER) as u32,
            shared_bytes: shared as u32,
            attention,
        })
    }

    /// Whether the launch should replace the two kernels: a row at the plan's capacity gives a
    /// half CTA at most [`QKV_SPLIT_MAX_TASKS`] chunks (a cluster's halves take the KV head's
    /// `Hq / Hkv` heads times the row's chunks in turn; a second task runs after the first).
    pub fn pays(&self) -> bool {
        let g = self.attention.geometry;
        let tasks = g.num_heads / g.num_kv_heads * g.max_chunks();
        tasks <= QKV_SPLIT_MAX_TASKS * 2 * QKV_SPLIT_CLUSTER
    }
}

/// Elements between rows of W in shared memory (the kernel's `gemm_skinny::shared_x_stride`):
/// K padded to 64 bytes past a multiple of 128.
fn shared_stride(k: usize) -> usize {
    k + (64 + 128 - (2 * k) % 128) % 128 / 2
}

/// The attention's arguments for a [`QkvSplit`] launch, made and checked by
/// [`super::Hp1Attention::args_leaving_partials`] for its plan.
pub struct SplitArgs {
    pub(super) plan: Plan,
    pub(super) slots: Vec<u64>,
}

/// A [`QkvSplitPlan`] with its entry point loaded.
pub struct QkvSplit {
    plan: QkvSplitPlan,
    stream: Arc<CudaStream>,
    func: CudaFunction,
}

impl QkvSplit {
    /// Loads the plan's entry (compiling `hp1_qkv_split.cu` on first use) and lets it take its
    /// shared memory.
    pub fn new(gpu: &Gpu, plan: QkvSplitPlan) -> Result<Self> {
        let func = gpu.function(&HP1_QKV_SPLIT, &plan.entry)?;
        gpu.set_max_dynamic_smem(&func, plan.shared_bytes)?;
        Ok(Self { plan, stream: gpu.stream().clone(), func })
    }

    /// The plan being launched.
    pub fn plan(&self) -> &QkvSplitPlan {
        &self.plan
    }

    /// The qkv GEMM of `x` (`[1, K]`) by `w` (`[N, K]`, the permuted layout of
    /// [`crate::gemm::layout`]) through `epilogue` (a [`Epilogue::QkNormRopeCache`]), then the
    /// attention `attention` describes, on the GPU's stream. Launch only.
    pub fn run(
        &self,
        x: &CudaView<'_, bf16>,
        w: &CudaView<'_, bf16>,
        mut epilogue: Epilogue<'_>,
        attention: &SplitArgs,
    ) -> Result<()> {
        let entry = self.plan.entry.as_str();
        if attention.plan != self.plan.attention {
            return Err(unsupported(entry, "the attention's arguments were made for another plan".into()));
        }
        if epilogue.kind() != EpilogueKind::QkNormRopeCache {
            return Err(unsupported(entry, format!("its epilogue is QkNormRopeCache, not {:?}", epilogue.kind())));
        }
        let s = self.plan.shape;
        for (what, got, want) in [("x", x.len(), s.k), ("w", w.len(), s.n * s.k)] {
            if got != want {
                return Err(unsupported(entry, format!("`{what}` has {got} elements, {s} needs {want}")));
            }
        }
        check_aligned(&self.stream, entry, "x", x)?;
        check_aligned(&self.stream, entry, "w", w)?;
        epilogue.check(entry, &self.stream, s)?;
        let (m, n, k) = (1i32, s.n as i32, s.k as i32);
        let mut b = Launch::new(&self.stream, &self.func);
        b.cluster_x(QKV_SPLIT_CLUSTER as u32);
        b.arg(x).arg(w).arg(&m).arg(&n).arg(&k);
        epilogue.push(entry, &mut b)?;
        for slot in &attention.slots {
            b.arg(slot);
        }
        let cfg = LaunchConfig {
            grid_dim: (self.plan.grid, 1, 1),
            block_dim: (QKV_SPLIT_THREADS, 1, 1),
            shared_mem_bytes: self.plan.shared_bytes,
        };
        // SAFETY: the arguments match HP1_QKV_SPLIT_ENTRY in hp1_qkv_split.cu: x, w, m, n, k and
        // QK_PARAMS, checked above as the skinny GEMM checks its own (sizes, alignment, the
        // epilogue's buffers against the shape), then HP1_ATTENTION_PARAMS, the partials, null
        // counters, out and rows_settled, which Hp1Attention::args_leaving_partials checked for
        // this plan; the grid is whole clusters, the shared memory the plan's.
        unsafe { b.launch(cfg) }.map_err(launch_error(entry, &cfg))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::plan::{Form, Geometry};
    use crate::runtime::cubin::functions;
    use crate::runtime::kernel_cache::compile;
    use crate::runtime::nvrtc_available;

    fn half_billion(max_blocks_per_seq: usize) -> Geometry {
        Geometry { rows: 1, num_heads: 8, num_kv_heads: 4, head_dim: 128, block_size: 16, max_blocks_per_seq }
    }

    #[test]
    fn asynct_half_billion_at_one_row_runs_four_clusters_of_four_blocks() {
        let attention = Plan::auto(half_billion(64)).unwrap();
        let plan = QkvSplitPlan::new(attention, 1024).unwrap();
        assert_eq!(plan.entry, "hp1_qkv_split_d128_r64_sparse");
        assert_eq!(plan.grid, 32);
        assert_eq!(plan.shape, GemmShape { m: 1, n: 2048, k: 1024 });
        // 64 rows of 1,056 elements, x, the partial sums.
        assert_eq!(plan.shared_bytes as usize, 64 * 1056 * 2 + 2048 + 8 * 8 * 68 * 4);
        assert_eq!(shared_stride(1024) * 2 % 128, 64);
        for k in [8, 64, 72, 1000, 4096] {
            let s = shared_stride(k);
            assert!(s >= k && (s * 2) % 128 == 64, "K {k}: stride {s}");
        }
    }

    #[test]
    fn it_pays_while_a_half_cta_runs_two_chunks_at_most() {
        // 1K tokens: 9 chunks, 18 tasks over 16 halves; 4K: 33 chunks.
        let at = |blocks| QkvSplitPlan::new(Plan::auto(half_billion(blocks)).unwrap(), 1024).unwrap();
        assert!(at(64).pays());
        assert!(at(126).pays()); // 2,016 keys: 16 chunks, 32 tasks
        assert!(!at(127).pays());
        assert!(!at(256).pays());
    }

    #[test]
    fn what_the_kernel_does_not_serve_is_refused_with_the_reason() {
        let g = half_billion(64);
        let err = |plan: Result<QkvSplitPlan>| plan.unwrap_err().to_string();
        let two = Plan::auto(Geometry { rows: 2, ..g }).unwrap();
        assert!(err(QkvSplitPlan::new(two, 1024)).contains("one decode row, not 2"));
        let decode = Plan::with_form(g, AttentionPath::Decode(Pv::Sparse), Form::TWO_ROUNDS).unwrap();
        assert!(err(QkvSplitPlan::new(decode, 1024)).contains("not the decode kernel's"));
        // 1 q head a KV head at D 64: 192 rows, 24 a CTA crossing heads; 4 at D 256: 1,536 rows.
        let odd = Plan::auto(Geometry { num_heads: 4, head_dim: 64, ..g }).unwrap();
        assert!(err(QkvSplitPlan::new(odd, 1024)).contains("192 qkv rows at D = 64"));
        let wide = Plan::auto(Geometry { num_heads: 16, head_dim: 256, ..g }).unwrap();
        assert!(err(QkvSplitPlan::new(wide, 64)).contains("1536 qkv rows at D = 256"));
        assert!(err(QkvSplitPlan::new(Plan::auto(g).unwrap(), 1020)).contains("multiple of 8, got 1020"));
        assert!(err(QkvSplitPlan::new(Plan::auto(g).unwrap(), 2048)).contains("past"));
        let dense = Plan::with_form(g, AttentionPath::SplitK(Pv::Dense), Form::TWO_ROUNDS).unwrap();
        assert_eq!(QkvSplitPlan::new(dense, 512).unwrap().entry, "hp1_qkv_split_d128_r64_dense");
    }

    #[test]
    fn every_entry_a_plan_can_name_is_in_the_compiled_kernel() {
        if !nvrtc_available() {
            println!("SKIPPED: no NVRTC library here (scripts/local-nvrtc.sh installs one)");
            return;
        }
        let names = functions(&compile(&HP1_QKV_SPLIT, "sm_90a").unwrap_or_else(|e| panic!("{e}"))).unwrap();
        for (head_dim, rows) in QKV_SPLIT_ENTRIES {
            let per_kv = rows * QKV_SPLIT_CLUSTER / head_dim - 2;
            for pv in [Pv::Dense, Pv::Sparse] {
                let g = Geometry { head_dim, num_heads: 4 * per_kv, ..half_billion(64) };
                let plan =
                    QkvSplitPlan::new(Plan::with_form(g, AttentionPath::SplitK(pv), Form::TWO_ROUNDS).unwrap(), 256);
                let entry = plan.unwrap().entry;
                assert!(names.contains(&entry), "{entry} missing");
            }
        }
    }
}
