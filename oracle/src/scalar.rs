//! The float types the oracle is generic over.
//!
//! One code path serves as the exact f64 reference and as the f32 CPU backend, so every
//! numeric routine is written against [`Scalar`] rather than a concrete type.

use std::fmt::{Debug, Display};
use std::iter::Sum;

/// A float the oracle computes in: `f32` (the CPU backend) or `f64` (the reference).
pub trait Scalar:
    num_traits::Float
    + ndarray::LinalgScalar
    + ndarray::ScalarOperand
    + Sum
    + Send
    + Sync
    + Debug
    + Display
    + Default
    + 'static
{
    /// Converts from f64, rounding to nearest where the type is narrower.
    fn of(x: f64) -> Self;
    /// Widens to f64 (exact for both implementors).
    fn f64(self) -> f64;
}

impl Scalar for f32 {
    fn of(x: f64) -> Self {
        x as f32
    }
    fn f64(self) -> f64 {
        self as f64
    }
}

impl Scalar for f64 {
    fn of(x: f64) -> Self {
        x
    }
    fn f64(self) -> f64 {
        self
    }
}

/// Rounds to the nearest bf16 value (ties to even) and widens back, the rounding a bf16
/// store on the GPU performs. NaN stays NaN; a value past bf16's largest rounds to infinity.
///
/// The rounding is done here on the f64 bits rather than by `half::bf16::from_f64`: that one
/// drops the low 32 bits of the f64 before it looks at the bits below the rounding bit, so a
/// value just above a tie (the excess in those 32 bits) goes down to the even neighbour instead
/// of up. The oracle's f64 values between rounding points are exact enough to land there (about
/// one in 20 000 values of a forward), and each such flip moves the bf16 mode away from what a
/// correctly rounding path (the GPU, PyTorch) computes from the same inputs.
pub fn round_bf16<T: Scalar>(x: T) -> T {
    T::of(bf16_nearest(x.f64()))
}

/// Explicit mantissa bits an f64 has and a bf16 (7 of them) does not.
const DROPPED_BITS: u32 = 52 - 7;
/// bf16 shares f32's exponent range: its smallest normal is 2^-126 ...
const BF16_MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;
/// ... its subnormals are the multiples of 2^-133 below that ...
const BF16_SUBNORMAL_STEP: f64 = f64::from_bits(((1023 - 133) as u64) << 52);
/// ... and a value that rounds up to 2^128 is past its largest finite value.
const BF16_OVERFLOW: f64 = f64::from_bits(((1023 + 128) as u64) << 52);

/// `x` rounded to the nearest bf16 value, ties to even, in one step.
fn bf16_nearest(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    if x.abs() < BF16_MIN_NORMAL {
        // Scaling by a power of two is exact, so this rounds once, onto the subnormal grid.
        return (x / BF16_SUBNORMAL_STEP).round_ties_even() * BF16_SUBNORMAL_STEP;
    }
    // Adding just under half a unit of the kept last bit, plus that bit, carries into it exactly
    // when the dropped bits are above half, or at half with the kept bit odd; the sign bit is
    // apart from the magnitude, so this holds for negative values too.
    let bits = x.to_bits();
    let kept_lsb = (bits >> DROPPED_BITS) & 1;
    let half = 1u64 << (DROPPED_BITS - 1);
    let rounded = f64::from_bits((bits + (half - 1) + kept_lsb) & !((1u64 << DROPPED_BITS) - 1));
    if rounded.abs() >= BF16_OVERFLOW {
        f64::INFINITY.copysign(x)
    } else {
        rounded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 1 + k 2^-7 for k in 0..128 are the bf16 values in [1, 2); their midpoints are ties.
    fn one_plus(k: f64) -> f64 {
        1.0 + k * 2f64.powi(-7)
    }

    #[test]
    fn ties_go_to_the_even_neighbour_and_anything_above_a_tie_goes_up() {
        assert_eq!(round_bf16(one_plus(0.5)), 1.0);
        assert_eq!(round_bf16(one_plus(1.5)), one_plus(2.0));
        assert_eq!(round_bf16(-one_plus(0.5)), -1.0);
        // Above the tie by one f64 ulp, far below the 32 bits `half::bf16::from_f64` reads.
        let above = f64::from_bits(one_plus(0.5).to_bits() + 1);
        assert_eq!(round_bf16(above), one_plus(1.0));
        assert_eq!(round_bf16(-above), -one_plus(1.0));
        assert_ne!(half::bf16::from_f64(above).to_f64(), one_plus(1.0), "the case half's conversion gets wrong");
        let below = f64::from_bits(one_plus(1.5).to_bits() - 1);
        assert_eq!(round_bf16(below), one_plus(1.0));
    }

    #[test]
    fn carries_into_the_exponent_overflow_to_infinity_and_keep_nan() {
        assert_eq!(round_bf16(one_plus(127.75)), 2.0);
        let max = half::bf16::MAX.to_f64();
        assert_eq!(round_bf16(max), max);
        assert_eq!(round_bf16(max * (1.0 + 2f64.powi(-9))), max, "below half a unit past the largest");
        assert_eq!(round_bf16(max * (1.0 + 2f64.powi(-8))), f64::INFINITY);
        assert_eq!(round_bf16(-max * (1.0 + 2f64.powi(-8))), f64::NEG_INFINITY);
        assert_eq!(round_bf16(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert!(round_bf16(f64::NAN).is_nan());
    }

    #[test]
    fn subnormals_round_onto_the_2_pow_minus_133_grid() {
        let step = BF16_SUBNORMAL_STEP;
        assert_eq!(round_bf16(2.5 * step), 2.0 * step);
        assert_eq!(round_bf16(3.5 * step), 4.0 * step);
        assert_eq!(round_bf16(f64::from_bits((2.5 * step).to_bits() + 1)), 3.0 * step);
        assert_eq!(round_bf16(-0.25 * step), 0.0);
        assert_eq!(round_bf16(BF16_MIN_NORMAL - 0.25 * step), BF16_MIN_NORMAL);
    }

    proptest! {
        /// An f32 holds all its bits in the f64's upper 32 and 3 more, so for f32 inputs half's
        /// own f32 conversion (which reads every bit) is a reference to agree with bit for bit.
        #[test]
        fn agrees_with_halfs_f32_rounding_on_every_f32(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assume!(x.is_finite());
            let want = half::bf16::from_f32(x).to_f64();
            prop_assert_eq!(round_bf16(x as f64).to_bits(), want.to_bits());
            prop_assert_eq!(round_bf16(x).to_bits(), (want as f32).to_bits());
        }

        /// Against a rounding written another way: the two bf16 neighbours, and the nearer one
        /// (the even one at a tie), decided with exact f64 arithmetic.
        #[test]
        fn picks_the_nearer_neighbour(x in -1e6f64..1e6) {
            prop_assume!(x.abs() >= BF16_MIN_NORMAL);
            let lo = f64::from_bits(x.abs().to_bits() & !((1u64 << DROPPED_BITS) - 1));
            let hi = f64::from_bits(lo.to_bits() + (1u64 << DROPPED_BITS));
            let (dlo, dhi) = (x.abs() - lo, hi - x.abs());
            let lo_even = (lo.to_bits() >> DROPPED_BITS) & 1 == 0;
            let nearest = if dlo < dhi || (dlo == dhi && lo_even) { lo } else { hi };
            prop_assert_eq!(round_bf16(x), nearest.copysign(x));
        }
    }
}
