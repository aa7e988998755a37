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
/// store on the GPU performs. NaN stays NaN.
pub fn round_bf16<T: Scalar>(x: T) -> T {
    T::of(half::bf16::from_f64(x.f64()).to_f64())
}
