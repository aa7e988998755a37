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
//! The host side ([`stacked_rows`], [`qkv_rows`], [`gate_up_rows`]) is plain and tested without
//! a GPU; [`DeviceWeights::upload`] only copies.

use half::bf16;
use ndarray::{Array1, Array2};
use oracle::model::weights::{LayerWeights, ModelDims, ModelWeights, UClipNormWeights};

use cudarc::driver::CudaSlice;
use gpu::gemm::layout;
use gpu::ops::{HeadShape, UClipNormParams};
use gpu::Gpu;

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

    /// Uploads `weights` (shapes as the checkpoint loader checked them against `dims`), calling
    /// `progress(done, total)` after each layer.
    pub fn upload(
        gpu: &Gpu,
        weights: &ModelWeights<bf16>,
        dims: &ModelDims,
        progress: &mut dyn FnMut(usize, usize),
    ) -> gpu::Result<Self> {
        let mut bytes = 0;
        let mut matrix = |rows: Vec<bf16>| -> gpu::Result<CudaSlice<bf16>> {
            bytes += rows.len() * 2;
            gpu.upload(&rows)
        };
        let embed_tokens = matrix(stacked_rows(&[&weights.embed_tokens]))?;
        let lm_head = weights.lm_head.as_ref().map(|h| matrix(stacked_rows(&[h]))).transpose()?;
        let total = weights.layers.len();
        let mut layers = Vec::with_capacity(total);
        for (i, layer) in weights.layers.iter().enumerate() {
            layers.push(upload_layer(gpu, i, layer, dims, &mut matrix)?);
            progress(i + 1, total);
        }
        let norm = upload_norm(gpu, "model.norm", dims.hidden_size, &weights.norm)?;
        Ok(Self { embed_tokens, layers, norm, lm_head, bytes })
    }
}

fn upload_layer(
    gpu: &Gpu,
    i: usize,
    l: &LayerWeights<bf16>,
    dims: &ModelDims,
    matrix: &mut dyn FnMut(Vec<bf16>) -> gpu::Result<CudaSlice<bf16>>,
) -> gpu::Result<DeviceLayer> {
    let a = &l.attn;
    let prefix = format!("model.layers.{i}");
    let norm = |name: &str, channels: usize, w: &UClipNormWeights<bf16>| {
        upload_norm(gpu, &format!("{prefix}.{name}"), channels, w)
    };
    let (d, hidden) = (dims.head_dim, dims.hidden_size);
    let heads = HeadShape { num_heads: dims.num_heads, num_kv_heads: dims.num_kv_heads, head_dim: d };
    Ok(DeviceLayer {
        qkv: matrix(qkv_rows(&a.q_proj, &a.k_proj, &a.v_proj, heads))?,
        o: matrix(stacked_rows(&[&a.o_proj]))?,
        gate_up: matrix(gate_up_rows(&l.gate_proj, &l.up_proj))?,
        down: matrix(stacked_rows(&[&l.down_proj]))?,
        q_norm: norm("self_attn.q_norm", d, &a.q_norm)?,
        k_norm: norm("self_attn.k_norm", d, &a.k_norm)?,
        sigma: gpu.upload(&widen(&a.hp1_sigma))?,
        gamma: gpu.upload(&widen(&a.hp1_gamma))?,
        input_norm: norm("input_layernorm", hidden, &l.input_layernorm)?,
        post_attention_norm: norm("post_attention_layernorm", hidden, &l.post_attention_layernorm)?,
        pre_feedforward_norm: norm("pre_feedforward_layernorm", hidden, &l.pre_feedforward_layernorm)?,
        post_feedforward_norm: norm("post_feedforward_layernorm", hidden, &l.post_feedforward_layernorm)?,
    })
}

fn upload_norm(gpu: &Gpu, name: &str, channels: usize, w: &UClipNormWeights<bf16>) -> gpu::Result<UClipNormParams> {
    let bias = w.bias.as_ref().map(widen);
    UClipNormParams::upload(gpu, name, channels, &widen(&w.alpha), &widen(&w.weight), bias.as_deref())
}

fn widen(v: &Array1<bf16>) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

/// The rows of `matrices` one after another, row-major: matrices of one input width stacked
/// into one weight, so the GEMM that reads their shared input runs once.
pub fn stacked_rows(matrices: &[&Array2<bf16>]) -> Vec<bf16> {
    let len = matrices.iter().map(|m| m.len()).sum();
    let mut rows = Vec::with_capacity(len);
    for m in matrices {
        debug_assert_eq!(m.ncols(), matrices[0].ncols(), "stacked matrices share their input width");
        rows.extend(m.iter().copied());
    }
    rows
}

/// The fused qkv weight as the device holds it: the rows of `q` (`[Hq D, hidden]`), `k` and `v`
/// (`[Hkv D, hidden]`) stacked, each q and k head's rows in the permuted order of
/// [`gpu::gemm::layout`] (`heads.head_dim` a multiple of 16).
pub fn qkv_rows(q: &Array2<bf16>, k: &Array2<bf16>, v: &Array2<bf16>, heads: HeadShape) -> Vec<bf16> {
    layout::permute_rows(&stacked_rows(&[q, k, v]), q.ncols(), |r| layout::qkv_source(r, heads))
}

/// The fused gate/up weight as the device holds it: the rows of `gate` and `up` (each
/// `[I, hidden]`) interleaved in groups of 8, the layout of [`gpu::gemm::layout`].
pub fn gate_up_rows(gate: &Array2<bf16>, up: &Array2<bf16>) -> Vec<bf16> {
    let inter = gate.nrows();
    layout::permute_rows(&stacked_rows(&[gate, up]), gate.ncols(), |r| layout::gate_up_source(r, inter))
}

#[cfg(test)]
mod tests {
    use super::*;

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
