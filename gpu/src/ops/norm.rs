//! UClipNorm parameters on the device, and the Peri-LN kernel of `peri_ln_residual.cu`: the
//! fused post-sublayer norm + residual add + next norm.
//!
//! UClipNorm (SPEC section 3) has no reduction, so a norm fuses into whatever is next to it. After
//! attention, [`PeriLn::residual`] turns the o_proj output and the residual stream into the new
//! residual stream and the MLP's input in one pass; after the MLP, the same call with the
//! post-feedforward norm and the next layer's input norm (the final norm after the last layer).
//! The first layer's input norm comes with the embedding gather
//! ([`super::Embedding::run_normed`]).

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut};
use half::bf16;

use super::{as_i32, check_aligned, check_len, elementwise_config, unsupported};
use crate::error::Result;
use crate::kernels::PERI_LN_RESIDUAL;
use crate::runtime::{launch_error, Gpu, Launch};

/// One UClipNorm's parameters on the device, as f32 (exact for bf16 checkpoints): `alpha` and
/// `weight` each `[1]` or `[C]`, `bias` `[C]` or absent (uploaded as a single 0, which adds what
/// the oracle's zero bias adds).
pub struct UClipNormParams {
    alpha: CudaSlice<f32>,
    weight: CudaSlice<f32>,
    bias: CudaSlice<f32>,
    /// Element strides of alpha, weight, bias: 0 for `[1]`, 1 for `[C]`.
    strides: [i32; 3],
    channels: usize,
}

impl UClipNormParams {
    /// Checks the shapes against `channels` (errors name `name`, the checkpoint prefix such as
    /// `model.layers.3.post_attention_layernorm`) and uploads.
    pub fn upload(
        gpu: &Gpu,
        name: &str,
        channels: usize,
        alpha: &[f32],
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Self> {
        let strides = strides(name, channels, alpha.len(), weight.len(), bias.map(<[f32]>::len))?;
        Ok(Self {
            alpha: gpu.upload(alpha)?,
            weight: gpu.upload(weight)?,
            bias: gpu.upload(bias.unwrap_or(&[0.0]))?,
            strides,
            channels,
        })
    }

    /// `C`, the channels the norm applies to.
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Pushes the six kernel arguments `alpha, alpha_stride, weight, weight_stride, bias, bias_stride`.
    pub(crate) fn push(&self, builder: &mut Launch<'_>) {
        builder
            .arg(&self.alpha)
            .arg(&self.strides[0])
            .arg(&self.weight)
            .arg(&self.strides[1])
            .arg(&self.bias)
            .arg(&self.strides[2]);
    }

    /// Pushes the same six arguments for no norm (null arrays, zero strides), to a kernel told
    /// by another argument not to read them.
    pub(crate) fn push_absent(builder: &mut Launch<'_>) {
        for _ in 0..3 {
            builder.arg(&0u64).arg(&0i32);
        }
    }
}

/// The kernel strides of alpha, weight and bias (0 for `[1]`, 1 for `[C]`; an absent bias is a
/// `[1]` zero), or an error naming `name.part`, its shape and the shapes it may have.
fn strides(name: &str, channels: usize, alpha: usize, weight: usize, bias: Option<usize>) -> Result<[i32; 3]> {
    if channels == 0 {
        return Err(unsupported("UClipNorm", format!("{name} must have at least one channel")));
    }
    as_i32("UClipNorm", "channels", channels)?;
    let stride = |part: &str, len: usize, scalar_ok: bool| -> Result<i32> {
        match len {
            n if n == channels && n > 0 => Ok(1),
            1 if scalar_ok => Ok(0),
            n => {
                let want = if scalar_ok { format!("[1] or [{channels}]") } else { format!("[{channels}]") };
                Err(unsupported("UClipNorm", format!("{name}.{part} has shape [{n}], expected {want}")))
            }
        }
    };
    Ok([
        stride("alpha", alpha, true)?,
        stride("weight", weight, true)?,
        match bias {
            Some(len) => stride("bias", len, false)?,
            None => 0,
        },
    ])
}

/// The Peri-LN kernels, loaded.
pub struct PeriLn {
    stream: Arc<CudaStream>,
    fused: CudaFunction,
}

impl PeriLn {
    /// Loads `peri_ln_residual.cu` (compiling it on first use).
    pub fn new(gpu: &Gpu) -> Result<Self> {
        Ok(Self { stream: gpu.stream().clone(), fused: gpu.function(&PERI_LN_RESIDUAL, "peri_ln_residual")? })
    }

    /// `x_out = bf16(x + bf16(after(a)))`, `h_out = bf16(before(x_out))`, every buffer
    /// `[tokens, hidden]` with `hidden` the norms' channels (a multiple of 8); `a` and `x` are
    /// only read. Launch only.
    pub fn residual(
        &self,
        a: &CudaView<'_, bf16>,
        x: &CudaView<'_, bf16>,
        after: &UClipNormParams,
        before: &UClipNormParams,
        x_out: &mut CudaViewMut<'_, bf16>,
        h_out: &mut CudaViewMut<'_, bf16>,
    ) -> Result<()> {
        const ENTRY: &str = "peri_ln_residual";
        let hidden = after.channels();
        if before.channels() != hidden {
            return Err(unsupported(
                ENTRY,
                format!("the norms have {hidden} and {} channels, expected the same", before.channels()),
            ));
        }
        let num_vecs = check_rows(ENTRY, hidden, a.len())?;
        check_len(ENTRY, "x", x.len(), a.len())?;
        check_len(ENTRY, "x_out", x_out.len(), a.len())?;
        check_len(ENTRY, "h_out", h_out.len(), a.len())?;
        check_aligned(&self.stream, ENTRY, "a", a)?;
        check_aligned(&self.stream, ENTRY, "x", x)?;
        check_aligned(&self.stream, ENTRY, "x_out", x_out)?;
        check_aligned(&self.stream, ENTRY, "h_out", h_out)?;
        if num_vecs == 0 {
            return Ok(());
        }
        let hidden = as_i32(ENTRY, "hidden", hidden)?;
        let cfg = elementwise_config(num_vecs as u64);
        let mut b = Launch::new(&self.stream, &self.fused);
        b.arg(a).arg(x);
        after.push(&mut b);
        before.push(&mut b);
        b.arg(x_out).arg(h_out).arg(&num_vecs).arg(&hidden);
        // SAFETY: the arguments match the kernel's signature in peri_ln_residual.cu, and every
        // buffer's size and alignment was checked above against the elements the kernel touches.
        unsafe { b.launch(cfg) }.map_err(launch_error(ENTRY, &cfg))?;
        Ok(())
    }
}

/// Checks that `len` elements are whole rows of `hidden` (a multiple of 8) and returns the
/// number of 8-element vectors.
fn check_rows(entry: &str, hidden: usize, len: usize) -> Result<i64> {
    if hidden == 0 || !hidden.is_multiple_of(8) {
        return Err(unsupported(entry, format!("hidden must be a positive multiple of 8, got {hidden}")));
    }
    if !len.is_multiple_of(hidden) {
        return Err(unsupported(entry, format!("{len} elements are not whole rows of {hidden}")));
    }
    Ok((len / 8) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_combination_gets_its_strides_and_misfits_are_named() {
        assert_eq!(strides("n", 64, 1, 1, None).unwrap(), [0, 0, 0]);
        assert_eq!(strides("n", 64, 64, 1, Some(64)).unwrap(), [1, 0, 1]);
        assert_eq!(strides("n", 64, 1, 64, None).unwrap(), [0, 1, 0]);
        assert_eq!(strides("n", 1, 1, 1, Some(1)).unwrap(), [1, 1, 1]);
        let e = strides("model.norm", 64, 3, 1, None).unwrap_err().to_string();
        assert!(e.contains("model.norm.alpha has shape [3], expected [1] or [64]"), "{e}");
        let e = strides("model.norm", 64, 1, 1, Some(1)).unwrap_err().to_string();
        assert!(e.contains("model.norm.bias has shape [1], expected [64]"), "{e}");
        assert!(strides("n", 0, 1, 1, None).is_err());
    }

    #[test]
    fn rows_must_be_whole_and_a_multiple_of_eight_wide() {
        assert_eq!(check_rows("k", 64, 7 * 64).unwrap(), 56);
        assert!(check_rows("k", 60, 120).unwrap_err().to_string().contains("multiple of 8, got 60"));
        assert!(check_rows("k", 64, 100).unwrap_err().to_string().contains("not whole rows of 64"));
    }
}
