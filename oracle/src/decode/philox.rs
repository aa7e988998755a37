//! Philox4x32-10 and the per-token uniform and Gumbel draws that sampling is built on.
//!
//! Philox (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011) is a
//! counter-based generator: the output is a pure function of a 128-bit counter and a 64-bit key, so
//! the oracle and a GPU kernel that evaluate it at the same `(seed, step, token)` draw the same number,
//! with no state to carry between steps and no ordering between threads.
//!
//! # The draw for token `v` at decoding step `step` of a request seeded with `seed`
//!
//! ```text
//! key     = (seed as u32, (seed >> 32) as u32)
//! counter = (v, step as u32, (step >> 32) as u32, 0)
//! x       = philox4x32_10(counter, key)[0]
//! u       = ((x as f64) + 0.5) * 2^-32           // in (0, 1), never 0 or 1
//! gumbel  = -ln(-ln(u))                           // f64 natural logarithm, twice
//! ```
//!
//! `u` is exact in any IEEE double arithmetic: `x < 2^32` and `x + 0.5` fit the 53-bit significand
//! and the scaling is by a power of two, so a CUDA kernel computing `((double)x + 0.5) * 0x1p-32`
//! gets the same bits. Only the two logarithms are not pinned to the bit: Rust's `f64::ln` and CUDA's
//! double `log` are each within one ulp of the true value, so `gumbel` may differ in its last bits,
//! which changes a sampled token only when two candidates' scores agree to about 1e-15 relative.

/// First round multiplier (applied to counter word 0).
const M0: u32 = 0xD251_1F53;
/// Second round multiplier (applied to counter word 2).
const M1: u32 = 0xCD9E_8D57;
/// Weyl increment of key word 0 between rounds (the golden ratio).
const W0: u32 = 0x9E37_79B9;
/// Weyl increment of key word 1 between rounds (sqrt(3) - 1).
const W1: u32 = 0xBB67_AE85;
/// Rounds: ten is Random123's default and the crush-resistant choice.
const ROUNDS: usize = 10;

/// The high and low 32 bits of the 64-bit product `a * b`.
fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// One Philox round: two multiplies, the high halves xored with the other words and the key.
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mul_hi_lo(M0, c[0]);
    let (hi1, lo1) = mul_hi_lo(M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// Philox4x32-10: ten rounds over `counter`, the key bumped by the Weyl constants between rounds.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for r in 0..ROUNDS {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}

/// The uniform draw `u` in `(0, 1)` for token `token` at step `step` of a request seeded `seed`
/// (the module docs give the exact mapping).
pub fn uniform(seed: u64, step: u64, token: u32) -> f64 {
    let key = [seed as u32, (seed >> 32) as u32];
    let counter = [token, step as u32, (step >> 32) as u32, 0];
    let x = philox4x32_10(counter, key)[0];
    // 2^-32 as an exact power of two, so the product rounds nothing.
    (f64::from(x) + 0.5) * (1.0 / 4_294_967_296.0)
}

/// The standard Gumbel draw `-ln(-ln u)` for token `token` at step `step` of a request seeded `seed`.
pub fn gumbel(seed: u64, step: u64, token: u32) -> f64 {
    -(-uniform(seed, step, token).ln()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers from the Random123 distribution's `kat_vectors` (philox4x32, 10 rounds).
    #[test]
    fn matches_random123_known_answers() {
        let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            ([0; 4], [0; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (counter, key, want) in cases {
            assert_eq!(philox4x32_10(counter, key), want, "counter {counter:08x?} key {key:08x?}");
        }
    }

    #[test]
    fn uniform_is_the_documented_function_of_philox_word_zero() {
        let seed = 0x0123_4567_89ab_cdef_u64;
        let step = 0x0000_0001_0000_0002_u64;
        let x = philox4x32_10([7, 2, 1, 0], [0x89ab_cdef, 0x0123_4567])[0];
        assert_eq!(uniform(seed, step, 7), (x as f64 + 0.5) / 2f64.powi(32));
    }

    #[test]
    fn uniform_stays_strictly_inside_the_unit_interval_at_the_extremes() {
        let lo = 0.5 / 2f64.powi(32);
        let hi = (u32::MAX as f64 + 0.5) / 2f64.powi(32);
        assert!(lo > 0.0 && hi < 1.0);
        assert!((-(-lo.ln()).ln()).is_finite() && (-(-hi.ln()).ln()).is_finite());
    }

    #[test]
    fn every_key_and_counter_word_changes_the_draw() {
        let base = uniform(1, 1, 1);
        for other in [
            uniform(2, 1, 1),
            uniform(1 << 32 | 1, 1, 1),
            uniform(1, 2, 1),
            uniform(1, 1 << 32 | 1, 1),
            uniform(1, 1, 2),
        ] {
            assert_ne!(base, other);
        }
    }
}
