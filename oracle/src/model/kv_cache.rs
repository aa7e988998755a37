//! The paged KV cache of a whole model: one key and one value tensor per layer, each
//! `[num_blocks, block_size, Hkv, D]` (the vLLM flash layout, SPEC section 2).
//!
//! The cache only stores; which sequence owns which block is the caller's business (the block
//! table in [`AttnMetadata`](crate::hp1::AttnMetadata)). New tokens are written through a slot
//! mapping, `slot = block * block_size + offset`, exactly as the GPU's cache-write kernel does.

use ndarray::{s, Array4, ArrayView3};

use super::weights::ModelDims;
use crate::error::{invalid, Error, Result};
use crate::scalar::Scalar;

/// Per-layer key and value caches.
#[derive(Clone, Debug, PartialEq)]
pub struct KvCache<T> {
    /// Per layer, `[num_blocks, block_size, Hkv, D]` keys (after k_norm and RoPE).
    pub key: Vec<Array4<T>>,
    /// Per layer, `[num_blocks, block_size, Hkv, D]` values.
    pub value: Vec<Array4<T>>,
}

impl<T: Scalar> KvCache<T> {
    /// A zeroed cache of `num_blocks` blocks of `block_size` tokens for every layer of `dims`.
    pub fn new(dims: &ModelDims, num_blocks: usize, block_size: usize) -> Self {
        let shape = (num_blocks, block_size, dims.num_kv_heads, dims.head_dim);
        Self {
            key: (0..dims.num_layers).map(|_| Array4::zeros(shape)).collect(),
            value: (0..dims.num_layers).map(|_| Array4::zeros(shape)).collect(),
        }
    }

    /// Blocks per layer.
    pub fn num_blocks(&self) -> usize {
        self.key.first().map_or(0, |k| k.dim().0)
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.key.first().map_or(0, |k| k.dim().1)
    }

    /// Stores `k` and `v` (`[tokens, Hkv, D]`) of layer `layer`, token `i` at `slot_mapping[i]`.
    /// Nothing is written unless every slot is in range and every shape fits.
    pub fn write(
        &mut self,
        layer: usize,
        slot_mapping: &[i64],
        k: ArrayView3<'_, T>,
        v: ArrayView3<'_, T>,
    ) -> Result<()> {
        if layer >= self.key.len() {
            return invalid("layer", format!("is {layer}, the cache has {} layers", self.key.len()));
        }
        let (num_blocks, block_size, hkv, d) = self.key[layer].dim();
        for (name, shape) in [("k", k.shape()), ("v", v.shape())] {
            if shape != [slot_mapping.len(), hkv, d] {
                return Err(Error::Shape {
                    name,
                    got: shape.to_vec(),
                    expected: format!("[{}, {hkv}, {d}] (slot_mapping length, Hkv, D)", slot_mapping.len()),
                });
            }
        }
        let capacity = (num_blocks * block_size) as i64;
        if let Some((i, &slot)) = slot_mapping.iter().enumerate().find(|(_, &s)| s < 0 || s >= capacity) {
            return invalid(
                "slot_mapping",
                format!("token {i} maps to slot {slot}, the cache has slots 0..{capacity}"),
            );
        }
        let (key, value) = (&mut self.key[layer], &mut self.value[layer]);
        for (i, &slot) in slot_mapping.iter().enumerate() {
            let (b, o) = (slot as usize / block_size, slot as usize % block_size);
            key.slice_mut(s![b, o, .., ..]).assign(&k.slice(s![i, .., ..]));
            value.slice_mut(s![b, o, .., ..]).assign(&v.slice(s![i, .., ..]));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hp1::Hp1Params;
    use ndarray::Array3;

    fn dims() -> ModelDims {
        ModelDims {
            vocab_size: 8,
            hidden_size: 8,
            intermediate_size: 8,
            num_layers: 2,
            num_heads: 2,
            num_kv_heads: 1,
            head_dim: 2,
            rope_theta: 10000.0,
            max_position_embeddings: 64,
            hp1: Hp1Params { scale: 1.0, fir_k: 3, relu_pre: true, clip_min: 0.0, clip_max: 1.0 },
        }
    }

    #[test]
    fn write_puts_each_token_at_block_and_offset_of_its_slot() {
        let mut c = KvCache::<f64>::new(&dims(), 3, 4);
        assert_eq!((c.num_blocks(), c.block_size()), (3, 4));
        let k = Array3::from_shape_fn((2, 1, 2), |(i, _, j)| (10 * i + j + 1) as f64);
        let v = k.mapv(|x| -x);
        c.write(1, &[9, 2], k.view(), v.view()).unwrap();
        assert_eq!(c.key[1][[2, 1, 0, 1]], 2.0); // slot 9 = block 2, offset 1
        assert_eq!(c.value[1][[0, 2, 0, 0]], -11.0); // slot 2 = block 0, offset 2
        assert_eq!(c.key[0].sum(), 0.0);
    }

    #[test]
    fn out_of_range_slot_or_bad_shape_is_refused_and_writes_nothing() {
        let mut c = KvCache::<f64>::new(&dims(), 2, 4);
        let k = Array3::ones((2, 1, 2));
        let e = c.write(0, &[1, 8], k.view(), k.view()).unwrap_err().to_string();
        assert!(e.contains("slot 8") && e.contains("0..8"), "{e}");
        assert!(c.write(0, &[-1, 0], k.view(), k.view()).is_err());
        assert_eq!(c.key[0].sum(), 0.0);
        let e = c.write(0, &[1], k.view(), k.view()).unwrap_err().to_string();
        assert!(e.contains("`k`") && e.contains("[1, 1, 2]"), "{e}");
        assert!(c.write(2, &[0, 1], k.view(), k.view()).is_err());
    }
}
