//! A counter-based generator: every value is a pure function of a seed, a stream and an index.
//!
//! A case's data must replay exactly from its saved JSON, on any machine and whatever order the
//! values are asked for in, and the data at a logical position (sequence, token, head, dim) must
//! not depend on where the paged layout puts it. A stateful RNG gives neither, so each value is a
//! hash of its coordinates (SplitMix64's finaliser, applied once per coordinate).

/// Values of one kind (a stream) under one seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    key: u64,
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's output function: a bijection on u64 with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Counter {
    /// The stream `stream` of seed `seed`; different streams are independent.
    pub fn new(seed: u64, stream: u64) -> Self {
        Self { key: mix(mix(seed.wrapping_add(GOLDEN)) ^ stream.wrapping_mul(GOLDEN)) }
    }

    /// 64 random bits at coordinates `idx`.
    pub fn bits(&self, idx: &[u64]) -> u64 {
        idx.iter().fold(self.key, |h, &i| mix(h ^ mix(i.wrapping_add(GOLDEN))))
    }

    /// A uniform value in `[-1, 1)` at coordinates `idx`, on a grid of 2^-52.
    pub fn uniform(&self, idx: &[u64]) -> f64 {
        (self.bits(idx) >> 11) as f64 * 2f64.powi(-52) - 1.0
    }

    /// A uniform integer in `0..n` at coordinates `idx` (`n >= 1`; the modulo bias is below 2^-40
    /// for the sizes used here).
    pub fn below(&self, n: u64, idx: &[u64]) -> u64 {
        self.bits(idx) % n.max(1)
    }

    /// A permutation of `0..n` (Fisher-Yates driven by this stream).
    pub fn permutation(&self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1, &[i as u64]) as usize;
            p.swap(i, j);
        }
        p
    }
}

/// A stable 64-bit fingerprint of a byte string (for naming saved cases).
pub fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(mix(GOLDEN), |h, &b| mix(h ^ u64::from(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_depend_on_seed_stream_and_coordinates_only() {
        let a = Counter::new(7, 1);
        assert_eq!(a.bits(&[3, 4]), Counter::new(7, 1).bits(&[3, 4]));
        assert_ne!(a.bits(&[3, 4]), a.bits(&[4, 3]));
        assert_ne!(a.bits(&[3, 4]), Counter::new(7, 2).bits(&[3, 4]));
        assert_ne!(a.bits(&[3, 4]), Counter::new(8, 1).bits(&[3, 4]));
    }

    #[test]
    fn uniform_stays_in_range_and_is_centred() {
        let c = Counter::new(42, 0);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|i| c.uniform(&[i])).collect();
        assert!(xs.iter().all(|&x| (-1.0..1.0).contains(&x)));
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| x * x).sum::<f64>() / n as f64;
        // Uniform on [-1, 1): mean 0, variance 1/3; 20k draws put the mean within 0.02.
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0 / 3.0).abs() < 0.02, "variance {var}");
    }

    #[test]
    fn permutation_is_a_permutation_and_moves_things() {
        let p = Counter::new(5, 9).permutation(100);
        let mut sorted = p.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>());
        assert!(p.iter().enumerate().filter(|(i, &v)| *i == v).count() < 10);
        assert_eq!(Counter::new(5, 9).permutation(0), Vec::<usize>::new());
    }
}
