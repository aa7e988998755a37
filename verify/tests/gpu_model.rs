//! The GPU model (`model::gpu_backend`) on the device. So far: a checkpoint loaded as raw bf16
//! lands on the device in the stacked layouts the kernels read, bit for bit. The forward's
//! checks against the oracle's bf16-faithful mode come with the forward. Without a GPU every
//! check prints that it was skipped (`verify::gpu_harness`).

use std::sync::Arc;

use gpu::Gpu;
use half::bf16;
use model::checkpoint::{load_weights, save_checkpoint, StoredDtype};
use model::gpu_backend::weights::{stacked_rows, DeviceWeights};
use model::presets::Preset;
use ndarray::Array2;
use oracle::model::init::random_weights;

fn main() {
    verify::gpu_harness::run(
        "gpu_model",
        &[("weights_land_in_the_stacked_layouts_bit_for_bit", weights_land_in_the_stacked_layouts_bit_for_bit)],
    )
}

fn bits(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn weights_land_in_the_stacked_layouts_bit_for_bit(gpu: &Arc<Gpu>) -> Result<(), String> {
    let msg = |e: &dyn std::fmt::Display| e.to_string();
    for tied in [true, false] {
        let mut cfg = Preset::Tiny.config();
        cfg.tie_word_embeddings = tied;
        let dims = cfg.dims();
        let mut weights = random_weights(&dims, 21);
        if !tied {
            weights.lm_head = Some(weights.embed_tokens.mapv(|x| -x * 0.5));
        }
        let dir = std::env::temp_dir().join(format!("asynct-gpu-model-{}-{tied}", std::process::id()));
        save_checkpoint(&dir, &cfg, &weights, StoredDtype::Bf16).map_err(|e| msg(&e))?;
        let host = load_weights::<bf16>(&dir, &cfg, &mut |_, _| {}).map_err(|e| msg(&e))?;
        std::fs::remove_dir_all(&dir).map_err(|e| msg(&e))?;
        let mut layers_done = Vec::new();
        let dev = DeviceWeights::upload(gpu, &host, &dims, &mut |done, total| layers_done.push((done, total)))
            .map_err(|e| msg(&e))?;
        let same = |what: &str, got: &cudarc::driver::CudaSlice<bf16>, want: Vec<bf16>| -> Result<(), String> {
            let got = gpu.download(got).map_err(|e| msg(&e))?;
            match bits(&got) == bits(&want) {
                true => Ok(()),
                false => Err(format!("{what} (tied {tied}): device bits differ from the stacked host rows")),
            }
        };
        let one = |m: &Array2<bf16>| stacked_rows(&[m]);
        for (i, (d, h)) in dev.layers.iter().zip(&host.layers).enumerate() {
            same(&format!("layer {i} qkv"), &d.qkv, stacked_rows(&[&h.attn.q_proj, &h.attn.k_proj, &h.attn.v_proj]))?;
            same(&format!("layer {i} o"), &d.o, one(&h.attn.o_proj))?;
            same(&format!("layer {i} gate_up"), &d.gate_up, stacked_rows(&[&h.gate_proj, &h.up_proj]))?;
            same(&format!("layer {i} down"), &d.down, one(&h.down_proj))?;
            let sigma = gpu.download(&d.sigma).map_err(|e| msg(&e))?;
            if sigma != h.attn.hp1_sigma.iter().map(|x| x.to_f32()).collect::<Vec<_>>() {
                return Err(format!("layer {i} sigma differs"));
            }
        }
        same("embed_tokens", &dev.embed_tokens, one(&host.embed_tokens))?;
        same("head", dev.head(), one(host.lm_head.as_ref().unwrap_or(&host.embed_tokens)))?;
        if dev.lm_head.is_some() == tied {
            return Err(format!("tied {tied}, but lm_head uploaded: {}", dev.lm_head.is_some()));
        }
        let matrices = |l: &oracle::model::weights::LayerWeights<bf16>| {
            l.attn.q_proj.len()
                + l.attn.k_proj.len()
                + l.attn.v_proj.len()
                + l.attn.o_proj.len()
                + l.gate_proj.len()
                + l.up_proj.len()
                + l.down_proj.len()
        };
        let want = 2
            * (host.embed_tokens.len()
                + host.lm_head.as_ref().map_or(0, |h| h.len())
                + host.layers.iter().map(matrices).sum::<usize>());
        if dev.bytes != want {
            return Err(format!("{} weight bytes counted, {want} uploaded", dev.bytes));
        }
        if layers_done != (1..=dims.num_layers).map(|d| (d, dims.num_layers)).collect::<Vec<_>>() {
            return Err(format!("progress reported {layers_done:?}"));
        }
    }
    Ok(())
}
