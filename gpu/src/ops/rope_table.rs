//! The RoPE cosine/sine table, computed on the host in f64 and rounded to f32 once.
//!
//! An angle `pos * theta^(-2j/D)` formed in f32 is already off by ~1e-3 rad near position 32K,
//! the largest error the q/k path would have; computed in f64 exactly as `oracle::rope` does,
//! each entry of the table is within half an f32 ulp of the oracle's cosine or sine.

use cudarc::driver::CudaSlice;

use crate::error::{Error, Result};
use crate::runtime::Gpu;

/// `[max_pos, D]` f32 on the device: row `p` holds `cos(p f_j)` for `j < D/2`, then `sin(p f_j)`.
pub struct RopeTable {
    table: CudaSlice<f32>,
    head_dim: usize,
    max_pos: usize,
}

/// The table's values on the host, in the device layout (`[max_pos, head_dim]`), with
/// `f_j = theta^(-2j/head_dim)` and each angle `pos * f_j` in f64.
pub fn rope_table_host(head_dim: usize, max_pos: usize, theta: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let freqs: Vec<f64> = (0..half).map(|j| theta.powf(-2.0 * j as f64 / head_dim as f64)).collect();
    let mut table = Vec::with_capacity(max_pos * head_dim);
    for pos in 0..max_pos {
        let angles: Vec<f64> = freqs.iter().map(|f| pos as f64 * f).collect();
        table.extend(angles.iter().map(|a| a.cos() as f32));
        table.extend(angles.iter().map(|a| a.sin() as f32));
    }
    table
}

impl RopeTable {
    /// Uploads the table for heads of `head_dim` channels (even, positive) and positions
    /// `0..max_pos` (at least 1, below 2^31).
    pub fn new(gpu: &Gpu, head_dim: usize, max_pos: usize, theta: f64) -> Result<Self> {
        let bad = |reason: String| Err(Error::Unsupported { entry: "rope table".to_string(), reason });
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return bad(format!("head_dim must be even and positive, got {head_dim}"));
        }
        if max_pos == 0 || i32::try_from(max_pos).is_err() {
            return bad(format!("max_pos must be 1 to 2^31 - 1, got {max_pos}"));
        }
        if !(theta.is_finite() && theta > 0.0) {
            return bad(format!("theta must be finite and positive, got {theta}"));
        }
        let table = gpu.upload(&rope_table_host(head_dim, max_pos, theta))?;
        Ok(Self { table, head_dim, max_pos })
    }

    /// Channels per head.
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    /// Positions covered: `0..max_pos`.
    pub fn max_pos(&self) -> usize {
        self.max_pos
    }

    pub(crate) fn table(&self) -> &CudaSlice<f32> {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_hold_cosines_then_sines_of_position_times_frequency() {
        // D = 4, theta = 100: f_0 = 1, f_1 = 0.1.
        let t = rope_table_host(4, 6, 100.0);
        assert_eq!(t.len(), 24);
        let row5 = &t[20..24];
        let want = [5f64.cos(), 0.5f64.cos(), 5f64.sin(), 0.5f64.sin()];
        for (got, want) in row5.iter().zip(want) {
            assert_eq!(*got, want as f32);
        }
        assert_eq!(&t[0..4], &[1.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn far_positions_hold_the_f64_angle_not_the_f32_one() {
        // Near 32K an angle formed in f32 is off by ~1e-3 rad; the table must not be.
        let (d, pos, theta) = (128usize, 32_767usize, 1e6f64);
        let t = rope_table_host(d, pos + 1, theta);
        let j = 1;
        let f = theta.powf(-2.0 * j as f64 / d as f64);
        let exact = pos as f64 * f;
        assert_eq!(t[pos * d + j], exact.cos() as f32);
        assert_eq!(t[pos * d + d / 2 + j], exact.sin() as f32);
        let in_f32 = (pos as f32 * f as f32).sin();
        assert!((f64::from(in_f32) - exact.sin()).abs() > 1e-5, "f32 angle unexpectedly exact");
    }
}
