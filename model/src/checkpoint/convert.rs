//! Converting tensor bytes between the stored float types (bf16, f16, f32) and the type the
//! weights are loaded into ([`Element`]: the CPU oracle's f32 or f64, or bf16 for the GPU).
//!
//! A 0.5B-parameter checkpoint is a billion bytes, so decoding runs in parallel chunks with the
//! finiteness check fused into the same pass rather than a second walk over the values.

use std::borrow::Cow;

use half::{bf16, f16};
use ndarray::ArrayViewD;
use rayon::prelude::*;
use safetensors::{Dtype, View};

/// Elements per parallel work item: large enough to amortise scheduling, small enough to balance.
const CHUNK: usize = 1 << 16;

/// The float types a checkpoint may store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoredDtype {
    /// bfloat16, what the GPU model runs in (the default).
    #[default]
    Bf16,
    /// IEEE half.
    F16,
    /// IEEE single.
    F32,
}

impl StoredDtype {
    /// The stored type of a safetensors dtype, or `None` for one the loader does not convert.
    pub fn from_safetensors(dtype: Dtype) -> Option<Self> {
        match dtype {
            Dtype::BF16 => Some(StoredDtype::Bf16),
            Dtype::F16 => Some(StoredDtype::F16),
            Dtype::F32 => Some(StoredDtype::F32),
            _ => None,
        }
    }

    /// The safetensors dtype it is written as.
    pub fn safetensors(self) -> Dtype {
        match self {
            StoredDtype::Bf16 => Dtype::BF16,
            StoredDtype::F16 => Dtype::F16,
            StoredDtype::F32 => Dtype::F32,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            StoredDtype::Bf16 | StoredDtype::F16 => 2,
            StoredDtype::F32 => 4,
        }
    }

    /// The `torch_dtype` string of `config.json` for this type.
    pub fn torch_name(self) -> &'static str {
        match self {
            StoredDtype::Bf16 => "bfloat16",
            StoredDtype::F16 => "float16",
            StoredDtype::F32 => "float32",
        }
    }
}

/// A type checkpoint tensors load into. bf16 is the GPU model's storage type: a bf16 checkpoint
/// fills it by copying bits, with no detour through f32; f16 and f32 checkpoints round to
/// nearest (even), as PyTorch's `.to(torch.bfloat16)` does.
pub trait Element: Copy + Default + Send + Sync + 'static {
    /// The value nearest `x`.
    fn from_f32(x: f32) -> Self;
    /// The value of stored bf16 `x` (exact for every type here).
    fn from_bf16(x: bf16) -> Self {
        Self::from_f32(x.to_f32())
    }
}

impl Element for f32 {
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Element for f64 {
    fn from_f32(x: f32) -> Self {
        f64::from(x)
    }
}

impl Element for bf16 {
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }

    fn from_bf16(x: bf16) -> Self {
        x
    }
}

/// The first non-finite element met while decoding: its flat index and value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct NonFinite {
    pub index: usize,
    pub value: f32,
}

/// Decodes little-endian `bytes` of type `dtype` into `T`, refusing NaN and infinities.
/// `bytes.len()` must be a multiple of the element size (the safetensors header check ensures it).
pub(crate) fn decode<T: Element>(bytes: &[u8], dtype: StoredDtype) -> Result<Vec<T>, NonFinite> {
    let size = dtype.size();
    let mut out = vec![T::default(); bytes.len() / size];
    // Every chunk reports its own first bad value and the smallest index wins, so the error
    // does not depend on which thread finished first.
    let first_bad = out
        .par_chunks_mut(CHUNK)
        .zip(bytes.par_chunks(CHUNK * size))
        .enumerate()
        .filter_map(|(chunk, (dst, src))| {
            let bad = match dtype {
                StoredDtype::Bf16 => decode_chunk(dst, src, bf16::from_le_bytes, T::from_bf16),
                StoredDtype::F16 => decode_chunk(dst, src, |b| f16::from_le_bytes(b).to_f32(), T::from_f32),
                StoredDtype::F32 => decode_chunk(dst, src, f32::from_le_bytes, T::from_f32),
            };
            bad.map(|(i, value)| NonFinite { index: chunk * CHUNK + i, value })
        })
        .min_by_key(|bad| bad.index);
    match first_bad {
        Some(bad) => Err(bad),
        None => Ok(out),
    }
}

/// Decodes one chunk with a read and a conversion monomorphised per stored type (no
/// per-element match), and only when some value is not finite looks for the first one.
fn decode_chunk<T, S, const N: usize>(
    dst: &mut [T],
    src: &[u8],
    read: impl Fn([u8; N]) -> S,
    convert: impl Fn(S) -> T,
) -> Option<(usize, f32)>
where
    S: Copy + Into<f32>,
{
    let mut all_finite = true;
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(N)) {
        let x = read(s.try_into().expect("chunks_exact yields N bytes"));
        all_finite &= x.into().is_finite();
        *d = convert(x);
    }
    if all_finite {
        return None;
    }
    src.chunks_exact(N)
        .map(|s| read(s.try_into().expect("chunks_exact yields N bytes")).into())
        .enumerate()
        .find(|(_, x): &(usize, f32)| !x.is_finite())
}

/// Encodes `src` into `dst` with a conversion monomorphised per stored type.
fn encode_chunk<const N: usize>(dst: &mut [u8], src: &[f32], to_bytes: impl Fn(f32) -> [u8; N]) {
    for (d, &x) in dst.chunks_exact_mut(N).zip(src) {
        d.copy_from_slice(&to_bytes(x));
    }
}

/// A tensor encoded for writing: the safetensors serializer's [`View`] over owned bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorBytes {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl TensorBytes {
    /// Encodes `values` (any layout; written row-major) as `dtype`, rounding to nearest even.
    pub fn encode(values: &ArrayViewD<'_, f32>, dtype: StoredDtype) -> Self {
        let size = dtype.size();
        let flat: Cow<'_, [f32]> = match values.as_slice() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(values.iter().copied().collect()),
        };
        let mut bytes = vec![0u8; flat.len() * size];
        bytes.par_chunks_mut(CHUNK * size).zip(flat.par_chunks(CHUNK)).for_each(|(dst, src)| match dtype {
            StoredDtype::Bf16 => encode_chunk(dst, src, |x| bf16::from_f32(x).to_le_bytes()),
            StoredDtype::F16 => encode_chunk(dst, src, |x| f16::from_f32(x).to_le_bytes()),
            StoredDtype::F32 => encode_chunk(dst, src, f32::to_le_bytes),
        });
        TensorBytes { dtype: dtype.safetensors(), shape: values.shape().to_vec(), bytes }
    }

    /// Raw bytes under an arbitrary safetensors dtype and shape, for writing deliberately
    /// odd tensors (integer types, shapes that disagree with a config).
    pub fn raw(dtype: Dtype, shape: Vec<usize>, bytes: Vec<u8>) -> Self {
        TensorBytes { dtype, shape, bytes }
    }
}

impl View for TensorBytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::Array1;
    use proptest::prelude::*;

    fn roundtrip(values: &[f32], dtype: StoredDtype) -> Vec<f32> {
        let arr = Array1::from(values.to_vec()).into_dyn();
        let t = TensorBytes::encode(&arr.view(), dtype);
        assert_eq!(t.bytes.len(), values.len() * dtype.size());
        decode::<f32>(&t.bytes, dtype).unwrap()
    }

    proptest! {
        #[test]
        fn each_dtype_roundtrips_with_its_own_rounding(values in prop::collection::vec(-1e4f32..1e4, 0..300)) {
            prop_assert_eq!(roundtrip(&values, StoredDtype::F32), values.clone());
            let want_bf16: Vec<f32> = values.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
            prop_assert_eq!(roundtrip(&values, StoredDtype::Bf16), want_bf16);
            let want_f16: Vec<f32> = values.iter().map(|&x| f16::from_f32(x).to_f32()).collect();
            prop_assert_eq!(roundtrip(&values, StoredDtype::F16), want_f16);
        }
    }

    #[test]
    fn known_bit_patterns_decode() {
        // bf16 0x3FC0 = 1.5, f16 0xC000 = -2.0, f32 0x3E800000 = 0.25; little-endian bytes.
        assert_eq!(decode::<f64>(&[0xC0, 0x3F], StoredDtype::Bf16).unwrap(), vec![1.5]);
        assert_eq!(decode::<f32>(&[0x00, 0xC0], StoredDtype::F16).unwrap(), vec![-2.0]);
        assert_eq!(decode::<f32>(&[0x00, 0x00, 0x80, 0x3E], StoredDtype::F32).unwrap(), vec![0.25]);
    }

    #[test]
    fn first_non_finite_is_reported_across_chunks() {
        let mut values = vec![0.5f32; 3 * CHUNK + 7];
        values[2 * CHUNK + 5] = f32::INFINITY;
        values[3 * CHUNK + 1] = f32::NAN;
        let arr = Array1::from(values).into_dyn();
        let t = TensorBytes::encode(&arr.view(), StoredDtype::Bf16);
        let err = decode::<f32>(&t.bytes, StoredDtype::Bf16).unwrap_err();
        assert_eq!(err.index, 2 * CHUNK + 5);
        assert_eq!(err.value, f32::INFINITY);
    }

    #[test]
    fn non_contiguous_views_are_written_row_major() {
        let a = ndarray::arr2(&[[1.0f32, 2.0], [3.0, 4.0]]);
        let t = TensorBytes::encode(&a.t().into_dyn(), StoredDtype::F32);
        assert_eq!(decode::<f32>(&t.bytes, StoredDtype::F32).unwrap(), vec![1.0, 3.0, 2.0, 4.0]);
    }
}
