//! The model's weights resident on the GPU, in the layouts its kernels read.
//!
//! Linear weights stay bf16 in the checkpoint's `[out, in]` layout (`y = x W^T`), and the GEMMs
//! that share an input are fused by stacking their rows, so one launch reads the input once:
//! q, k and v into one `[(Hq + 2 Hkv) D, hidden]` matrix (q heads, then k heads, then v heads,
//! each q and k head's rows permuted so that its RoPE pairs are 8 rows apart), gate and up into
//! one `[2 I, hidden]` matrix with their rows interleaved in groups of 8. [`gpu::gemm::layout`]
//! defines both orders: the skinny GEMM's fused epilogues pair those rows, and
//! `qk_norm_rope_cache` and `silu_mul` read the GEMMs' outputs in them. Norm parameters and the
//! HP1 gains go up as f32, exact for bf16 checkpoints. A tied model uploads its embedding once and
//! uses it as the head.
//!
//! Where the skinny kernel's wide form serves a weight at some decode batch of the model
//! ([`ClassSteps`]), the device also holds a copy of it in the class-step column order
//! ([`gpu::gemm::layout::to_class_steps`]), which that form reads.
//!
//! The host side ([`stacked_rows`], [`qkv_rows`], [`gate_up_rows`]) is plain and tested without
//! a GPU; [`DeviceWeights::upload`] only copies. A fused weight is written row by row straight
//! from its source matrices, in parallel (half a billion elements laid out on one thread cost a
//! start several hundred milliseconds); a weight the device holds as stored goes up from the
//! loaded array itself, with no copy.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use half::bf16;
use ndarray::{Array1, Array2};
use oracle::model::weights::{LayerWeights, ModelDims, ModelWeights, UClipNormWeights};
use rayon::prelude::*;

use cudarc::driver::CudaSlice;
use gpu::gemm::layout;
use gpu::ops::{HeadShape, UClipNormParams};
use gpu::Gpu;

use super::step_program::Weight;
use crate::start_times::{StartPhase, StartTimes};

/// One decoder layer on the device.
pub struct DeviceLayer {
    /// `[(Hq + 2 Hkv) D, hidden]`: q_proj, k_proj, v_proj stacked, q and k heads permuted
    /// ([`qkv_rows`]).
    pub qkv: CudaSlice<bf16>,
    /// `[hidden, Hq D]`.
    pub o: CudaSlice<bf16>,
    /// `[2 I, hidden]`: gate_proj and up_proj rows interleaved ([`gate_up_rows`]).
    pub gate_up: CudaSlice<bf16>,
    /// `[hidden, I]`.
    pub down: CudaSlice<bf16>,
    /// Over `D`.
    pub q_norm: UClipNormParams,
    /// Over `D`.
    pub k_norm: UClipNormParams,
    /// `[Hq]`.
    pub sigma: CudaSlice<f32>,
    /// `[Hq]`.
    pub gamma: CudaSlice<f32>,
    /// Over `hidden`: before attention.
    pub input_norm: UClipNormParams,
    /// Over `hidden`: on the attention output.
    pub post_attention_norm: UClipNormParams,
    /// Over `hidden`: before the MLP.
    pub pre_feedforward_norm: UClipNormParams,
    /// Over `hidden`: on the MLP output.
    pub post_feedforward_norm: UClipNormParams,
    /// The class-step copies of the weights [`ClassSteps`] names, by [`Weight::index`].
    pub class_steps: [Option<CudaSlice<bf16>>; 4],
}

impl DeviceLayer {
    /// `weight`'s class-step copy, which a plan that [`gpu::gemm::GemmPlan::reads_class_steps`]
    /// reads; an error where the model keeps none of it.
    pub fn class_steps(&self, weight: Weight) -> gpu::Result<&CudaSlice<bf16>> {
        self.class_steps[weight.index()].as_ref().ok_or_else(|| gpu::Error::Unsupported {
            entry: "gemm skinny wide".into(),
            reason: format!("the model keeps no class-step copy of the {weight:?} weight"),
        })
    }
}

/// Which of a layer's weights the device also holds in the class-step column order, by
/// [`Weight::index`]: for a model, those whose decode rows [`gpu::gemm::GemmPlan::decode_rows`]
/// plans on a form that reads that order at some decode batch the model runs
/// ([`ClassSteps::for_model`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassSteps(pub [bool; 4]);

impl ClassSteps {
    /// The weights (each `(N, K)` as `nk` gives it) whose decode rows may take a form that reads
    /// the class-step copy (the wide form, the class form on warpgroups): the dispatcher's own
    /// answer at some row count up to `max_decode_rows` on `sms` SMs among `forms` (the model's).
    /// Every row count is asked, since the class form on warpgroups is taken at 65 to 128 rows
    /// only; the choice does not depend on the epilogue.
    pub fn for_model(
        nk: impl Fn(Weight) -> (usize, usize),
        max_decode_rows: usize,
        sms: usize,
        forms: gpu::gemm::DecodeForms,
    ) -> Self {
        Self(Weight::ALL.map(|w| {
            let (n, k) = nk(w);
            (1..=max_decode_rows).any(|m| {
                let shape = gpu::gemm::GemmShape { m, n, k };
                gpu::gemm::GemmPlan::decode_rows_with(shape, sms, gpu::gemm::EpilogueKind::Store, forms)
                    .is_ok_and(|plan| plan.reads_class_steps())
            })
        }))
    }

    /// Whether the device holds `weight`'s copy.
    pub fn has(&self, weight: Weight) -> bool {
        self.0[weight.index()]
    }

    /// Device bytes the copies take over `layers` layers (each weight `(N, K)` as `nk` gives it).
    pub fn bytes(&self, nk: impl Fn(Weight) -> (usize, usize), layers: usize) -> usize {
        let layer: usize = Weight::ALL.iter().filter(|&&w| self.has(w)).map(|&w| nk(w).0 * nk(w).1 * 2).sum();
        layer * layers
    }
}

/// A whole model on the device.
pub struct DeviceWeights {
    /// `[vocab, hidden]`.
    pub embed_tokens: CudaSlice<bf16>,
    /// The decoder layers in order.
    pub layers: Vec<DeviceLayer>,
    /// Final norm before the head.
    pub norm: UClipNormParams,
    /// `[vocab, hidden]`, or `None` when the head is `embed_tokens`.
    pub lm_head: Option<CudaSlice<bf16>>,
    /// Device bytes the weights take.
    pub bytes: usize,
}

impl DeviceWeights {
    /// The output projection: `lm_head`, or `embed_tokens` when tied.
    pub fn head(&self) -> &CudaSlice<bf16> {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Device bytes `weights`' matrices will take (the norms and gains are a rounding error).
    pub fn bytes_of(weights: &ModelWeights<bf16>) -> usize {
        let layer = |l: &LayerWeights<bf16>| {
            let a = &l.attn;
            a.q_proj.len()
                + a.k_proj.len()
                + a.v_proj.len()
                + a.o_proj.len()
                + l.gate_proj.len()
                + l.up_proj.len()
                + l.down_proj.len()
        };
        2 * (weights.embed_tokens.len()
            + weights.lm_head.as_ref().map_or(0, |h| h.len())
            + weights.layers.iter().map(layer).sum::<usize>())
    }

    /// Uploads `weights` (shapes as the checkpoint loader checked them against `dims`) and the
    /// copies `class_steps` names, calling `progress(done, total)` after each layer; the host
    /// layout and the copies are recorded in `times` as [`StartPhase::WeightLayout`] and
    /// [`StartPhase::WeightUpload`].
    pub fn upload(
        gpu: &Gpu,
        weights: &ModelWeights<bf16>,
        dims: &ModelDims,
        class_steps: ClassSteps,
        progress: &mut dyn FnMut(usize, usize),
        times: &mut StartTimes,
    ) -> gpu::Result<Self> {
        let mut clock = UploadClock { gpu, bytes: 0, layout: Duration::ZERO, copy: Duration::ZERO };
        let embed_tokens = clock.matrix(|| row_major(&weights.embed_tokens))?;
        let lm_head = weights.lm_head.as_ref().map(|h| clock.matrix(|| row_major(h))).transpose()?;
        let total = weights.layers.len();
        let mut layers = Vec::with_capacity(total);
        for (i, layer) in weights.layers.iter().enumerate() {
            layers.push(upload_layer(&mut clock, i, layer, dims, class_steps)?);
            progress(i + 1, total);
        }
        let norm = upload_norm(gpu, "model.norm", dims.hidden_size, &weights.norm)?;
        times.record(StartPhase::WeightLayout, clock.layout);
        times.record(StartPhase::WeightUpload, clock.copy);
        Ok(Self { embed_tokens, layers, norm, lm_head, bytes: clock.bytes })
    }
}

/// Uploads matrices, keeping apart the time spent laying them out on the host and copying them.
struct UploadClock<'a> {
    gpu: &'a Gpu,
    bytes: usize,
    layout: Duration,
    copy: Duration,
}

impl UploadClock<'_> {
    /// Uploads the matrix `rows` lays out (the norms and gains, small, are counted as copies).
    fn matrix<'r>(&mut self, rows: impl FnOnce() -> Cow<'r, [bf16]>) -> gpu::Result<CudaSlice<bf16>> {
        Ok(self.matrix_and_steps(rows, None)?.0)
    }

    /// Uploads the matrix `rows` lays out and, where `class_steps` gives its columns, its
    /// class-step copy, laid out from the same rows.
    fn matrix_and_steps<'r>(
        &mut self,
        rows: impl FnOnce() -> Cow<'r, [bf16]>,
        class_steps: Option<usize>,
    ) -> gpu::Result<(CudaSlice<bf16>, Option<CudaSlice<bf16>>)> {
        let start = Instant::now();
        let rows = rows();
        self.layout += start.elapsed();
        let slice = self.copy_up(&rows)?;
        let steps = match class_steps {
            Some(k) if !k.is_multiple_of(layout::CLASS_STEP) || !rows.len().is_multiple_of(k) => {
                return Err(gpu::Error::Unsupported {
                    entry: "gemm skinny wide".into(),
                    reason: format!(
                        "a class-step copy needs rows of a multiple of {} columns, got {k}",
                        layout::CLASS_STEP
                    ),
                });
            }
            Some(k) => {
                let start = Instant::now();
                let steps = layout::to_class_steps(&rows, k);
                self.layout += start.elapsed();
                Some(self.copy_up(&steps)?)
            }
            None => None,
        };
        Ok((slice, steps))
    }

    fn copy_up(&mut self, rows: &[bf16]) -> gpu::Result<CudaSlice<bf16>> {
        let start = Instant::now();
        let slice = self.gpu.upload(rows)?;
        self.bytes += rows.len() * 2;
        self.copy += start.elapsed();
        Ok(slice)
    }

    /// Times `upload` as a copy.
    fn small<T>(&mut self, upload: impl FnOnce(&Gpu) -> gpu::Result<T>) -> gpu::Result<T> {
        let start = Instant::now();
        let out = upload(self.gpu);
        self.copy += start.elapsed();
        out
    }
}

fn upload_layer(
    clock: &mut UploadClock<'_>,
    i: usize,
    l: &LayerWeights<bf16>,
    dims: &ModelDims,
    class_steps: ClassSteps,
) -> gpu::Result<DeviceLayer> {
    let a = &l.attn;
    let prefix = format!("model.layers.{i}");
    let (d, hidden) = (dims.head_dim, dims.hidden_size);
    let norm = |clock: &mut UploadClock<'_>, name: &str, channels: usize, w: &UClipNormWeights<bf16>| {
        clock.small(|gpu| upload_norm(gpu, &format!("{prefix}.{name}"), channels, w))
    };
    let heads = HeadShape { num_heads: dims.num_heads, num_kv_heads: dims.num_kv_heads, head_dim: d };
    let rows = |weight: Weight| -> Cow<'_, [bf16]> {
        match weight {
            Weight::Qkv => Cow::Owned(qkv_rows(&a.q_proj, &a.k_proj, &a.v_proj, heads)),
            Weight::O => row_major(&a.o_proj),
            Weight::GateUp => Cow::Owned(gate_up_rows(&l.gate_proj, &l.up_proj)),
            Weight::Down => row_major(&l.down_proj),
        }
    };
    let columns = |weight: Weight| match weight {
        Weight::Qkv | Weight::GateUp => hidden,
        Weight::O => heads.q_width(),
        Weight::Down => dims.intermediate_size,
    };
    let mut steps = [None, None, None, None];
    let mut upload = |clock: &mut UploadClock<'_>, weight: Weight| {
        let (stored, copy) =
            clock.matrix_and_steps(|| rows(weight), class_steps.has(weight).then(|| columns(weight)))?;
        steps[weight.index()] = copy;
        gpu::Result::Ok(stored)
    };
    let (qkv, o) = (upload(clock, Weight::Qkv)?, upload(clock, Weight::O)?);
    let (gate_up, down) = (upload(clock, Weight::GateUp)?, upload(clock, Weight::Down)?);
    Ok(DeviceLayer {
        qkv,
        o,
        gate_up,
        down,
        q_norm: norm(clock, "self_attn.q_norm", d, &a.q_norm)?,
        k_norm: norm(clock, "self_attn.k_norm", d, &a.k_norm)?,
        sigma: clock.small(|gpu| gpu.upload(&widen(&a.hp1_sigma)))?,
        gamma: clock.small(|gpu| gpu.upload(&widen(&a.hp1_gamma)))?,
        input_norm: norm(clock, "input_layernorm", hidden, &l.input_layernorm)?,
        post_attention_norm: norm(clock, "post_attention_layernorm", hidden, &l.post_attention_layernorm)?,
        pre_feedforward_norm: norm(clock, "pre_feedforward_layernorm", hidden, &l.pre_feedforward_layernorm)?,
        post_feedforward_norm: norm(clock, "post_feedforward_layernorm", hidden, &l.post_feedforward_layernorm)?,
        class_steps: steps,
    })
}

fn upload_norm(gpu: &Gpu, name: &str, channels: usize, w: &UClipNormWeights<bf16>) -> gpu::Result<UClipNormParams> {
    let bias = w.bias.as_ref().map(widen);
    UClipNormParams::upload(gpu, name, channels, &widen(&w.alpha), &widen(&w.weight), bias.as_deref())
}

fn widen(v: &Array1<bf16>) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

/// `m` row-major: the loaded array's own elements when it is stored so (as the checkpoint
/// loader makes every matrix), else a copy.
fn row_major(m: &Array2<bf16>) -> Cow<'_, [bf16]> {
    match m.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(stacked_rows(&[m])),
    }
}

/// The rows of `matrices` one after another, row-major: matrices of one input width stacked
/// into one weight, so the GEMM that reads their shared input runs once.
pub fn stacked_rows(matrices: &[&Array2<bf16>]) -> Vec<bf16> {
    fused_rows(matrices, |r| r)
}

/// The fused qkv weight as the device holds it: the rows of `q` (`[Hq D, hidden]`), `k` and `v`
/// (`[Hkv D, hidden]`) stacked, each q and k head's rows in the permuted order of
/// [`gpu::gemm::layout`] (`heads.head_dim` a multiple of 16).
pub fn qkv_rows(q: &Array2<bf16>, k: &Array2<bf16>, v: &Array2<bf16>, heads: HeadShape) -> Vec<bf16> {
    fused_rows(&[q, k, v], |r| layout::qkv_source(r, heads))
}

/// The fused gate/up weight as the device holds it: the rows of `gate` and `up` (each
/// `[I, hidden]`) interleaved in groups of 8, the layout of [`gpu::gemm::layout`].
pub fn gate_up_rows(gate: &Array2<bf16>, up: &Array2<bf16>) -> Vec<bf16> {
    let inter = gate.nrows();
    fused_rows(&[gate, up], |r| layout::gate_up_source(r, inter))
}

/// The rows of `matrices` stacked (each of one width), in the order `source` gives: row `r` of
/// the result is row `source(r)` of the stack, as [`layout::permute_rows`] of the stack, but
/// written in parallel straight from the matrices, with no stacked copy between.
fn fused_rows(matrices: &[&Array2<bf16>], source: impl Fn(usize) -> usize + Sync) -> Vec<bf16> {
    let k = matrices.first().map_or(0, |m| m.ncols());
    debug_assert!(matrices.iter().all(|m| m.ncols() == k), "stacked matrices share their input width");
    let mut starts = Vec::with_capacity(matrices.len() + 1);
    starts.push(0);
    for m in matrices {
        starts.push(starts.last().copied().unwrap_or(0) + m.nrows());
    }
    let rows = starts.last().copied().unwrap_or(0);
    let mut out = vec![bf16::ZERO; rows * k];
    if k == 0 {
        return out;
    }
    out.par_chunks_mut(k).enumerate().for_each(|(r, dst)| {
        let s = source(r);
        // The matrix holding stacked row s: the last whose first row is at or before it.
        let m = starts.partition_point(|&start| start <= s) - 1;
        let row = matrices[m].row(s - starts[m]);
        match row.as_slice() {
            Some(src) => dst.copy_from_slice(src),
            None => dst.iter_mut().zip(row.iter()).for_each(|(d, x)| *d = *x),
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_class_step_copies_are_of_the_weights_whose_forms_read_them_past_64_rows() {
        // asynct-0.5b on 132 SMs: qkv [2048, 1024], o [1024, 1024], gate/up [6144, 1024], down
        // [1024, 3072]; gate/up has the 66 blocks of 64 rows the wide form asks for, o and down
        // the 16 clusters of 8 the class form on warpgroups fits in one CTA an SM, qkv neither.
        let nk = |w: Weight| match w {
            Weight::Qkv => (2048, 1024),
            Weight::O => (1024, 1024),
            Weight::GateUp => (6144, 1024),
            Weight::Down => (1024, 3072),
        };
        let all = gpu::gemm::DecodeForms::all;
        let steps = ClassSteps::for_model(nk, 128, 132, all(true));
        assert_eq!(Weight::ALL.map(|w| steps.has(w)), [false, true, true, true]);
        assert_eq!(steps.bytes(nk, 35), 35 * (1024 * 1024 + 6144 * 1024 + 1024 * 3072) * 2);
        // Past 128 rows too: the class form on warpgroups still serves a batch of 65 to 128.
        assert_eq!(ClassSteps::for_model(nk, 256, 132, all(true)), steps);
        let only = |wide, classes_wg| gpu::gemm::DecodeForms { wide, classes_wg, ..all(true) };
        let wide = ClassSteps::for_model(nk, 128, 132, only(true, false));
        assert_eq!(Weight::ALL.map(|w| wide.has(w)), [false, false, true, false]);
        let classes_wg = ClassSteps::for_model(nk, 100, 132, only(false, true));
        assert_eq!(Weight::ALL.map(|w| classes_wg.has(w)), [false, true, false, true]);
        // Not at 64 rows, not without wgmma, not with both forms turned off.
        for (rows, forms) in [(64, all(true)), (128, all(false)), (128, only(false, false))] {
            let none = ClassSteps::for_model(nk, rows, 132, forms);
            assert_eq!((none, none.bytes(nk, 35)), (ClassSteps::default(), 0), "{rows} rows, {forms:?}");
        }
        // On 16 SMs every weight's blocks fill half of them.
        assert_eq!(Weight::ALL.map(|w| ClassSteps::for_model(nk, 65, 16, all(true)).has(w)), [true; 4]);
    }

    #[test]
    fn stacking_keeps_each_matrix_row_major_and_in_order() {
        let b = |x: f32| bf16::from_f32(x);
        let q = Array2::from_shape_fn((2, 3), |(r, c)| b((r * 3 + c) as f32));
        let k = Array2::from_shape_fn((1, 3), |(_, c)| b(10.0 + c as f32));
        // A transposed view iterates in logical order too, so a layout mistake would show.
        let v_t = Array2::from_shape_fn((3, 2), |(r, c)| b(20.0 + (c * 3 + r) as f32));
        let v = v_t.t().to_owned();
        let got: Vec<f32> = stacked_rows(&[&q, &k, &v]).iter().map(|x| x.to_f32()).collect();
        assert_eq!(got, vec![0., 1., 2., 3., 4., 5., 10., 11., 12., 20., 21., 22., 23., 24., 25.]);
    }

    #[test]
    fn fused_rows_are_the_layout_permutation_of_the_stack() {
        let b = |x: usize| bf16::from_f32(x as f32);
        let heads = HeadShape { num_heads: 3, num_kv_heads: 1, head_dim: 32 };
        let q = Array2::from_shape_fn((96, 5), |(r, c)| b(r * 5 + c));
        let k = Array2::from_shape_fn((32, 5), |(r, c)| b(1000 + r * 5 + c));
        // Column-major, so the row copy takes its element-wise path.
        let v = Array2::from_shape_fn((5, 32), |(c, r)| b(2000 + r * 5 + c)).reversed_axes();
        assert!(v.as_slice().is_none());
        let stack = stacked_rows(&[&q, &k, &v]);
        let want = layout::permute_rows(&stack, 5, |r| layout::qkv_source(r, heads));
        assert_eq!(qkv_rows(&q, &k, &v, heads), want);
        let up = Array2::from_shape_fn((96, 5), |(r, c)| b(3000 + r * 5 + c));
        let want = layout::permute_rows(&stacked_rows(&[&q, &up]), 5, |r| layout::gate_up_source(r, 96));
        assert_eq!(gate_up_rows(&q, &up), want);
        assert_eq!(row_major(&v).into_owned(), stacked_rows(&[&v]));
        assert!(matches!(row_major(&q), Cow::Borrowed(_)));
    }

    #[test]
    fn gate_and_up_rows_alternate_in_groups_of_eight() {
        let (inter, hidden) = (24, 2);
        let b = |x: usize| bf16::from_f32(x as f32);
        // Distinct integers below 256, exact in bf16.
        let gate = Array2::from_shape_fn((inter, hidden), |(r, c)| b(2 * r + c));
        let up = Array2::from_shape_fn((inter, hidden), |(r, c)| b(128 + 2 * r + c));
        let got: Vec<f32> = gate_up_rows(&gate, &up).iter().map(|x| x.to_f32()).collect();
        let row = |w: &Array2<bf16>, r: usize| w.row(r).iter().map(|x| x.to_f32()).collect::<Vec<_>>();
        let mut want = Vec::new();
        for i in 0..inter / 8 {
            (0..8).for_each(|j| want.extend(row(&gate, 8 * i + j)));
            (0..8).for_each(|j| want.extend(row(&up, 8 * i + j)));
        }
        assert_eq!(got, want);
    }

    #[test]
    fn qkv_rows_pair_each_rope_channel_with_its_partner_and_keep_v() {
        let heads = HeadShape { num_heads: 2, num_kv_heads: 1, head_dim: 32 };
        let b = |x: usize| bf16::from_f32(x as f32);
        // One column: row r holds r (q rows 0..64, k rows 64..96, v rows 96..128).
        let q = Array2::from_shape_fn((64, 1), |(r, _)| b(r));
        let k = Array2::from_shape_fn((32, 1), |(r, _)| b(64 + r));
        let v = Array2::from_shape_fn((32, 1), |(r, _)| b(96 + r));
        let got: Vec<usize> = qkv_rows(&q, &k, &v, heads).iter().map(|x| x.to_f32() as usize).collect();
        let head =
            |base: usize| -> Vec<usize> { [0, 16, 8, 24].iter().flat_map(|&s| base + s..base + s + 8).collect() };
        let want: Vec<usize> = [head(0), head(32), head(64), (96..128).collect()].concat();
        assert_eq!(got, want);
    }
}
