//! Every path against the f64 reference: small shapes for compute-sanitizer, drawn shapes, and
//! the shapes of asynct-0.5b.

use std::sync::Arc;

use gpu::gemm::{Gemm, GemmShape};
use gpu::Gpu;
use verify::rng::Counter;

use super::device::{g, label, plans, run, Check, MODEL_SHAPES};
use super::reference::{draw_w, draw_x, Reference};

/// Runs every plan serving `shape` on fresh inputs drawn from `seed` and holds each output to
/// the reference; returns the plans' names.
fn every_path(gpu: &Gpu, shape: GemmShape, seed: u64) -> Result<Vec<String>, String> {
    let x = draw_x(seed, shape.m, shape.k);
    let w = draw_w(seed, shape.n, shape.k);
    let reference = Reference::new(&x, &w, shape.k);
    let (x_d, w_d) = (g(gpu.upload(&x))?, g(gpu.upload(&w))?);
    let mut names = Vec::new();
    for plan in plans(gpu, shape)? {
        let gemm = g(Gemm::new(gpu, plan))?;
        let got = run(gpu, &gemm, &x_d, &w_d)?;
        reference.check(&label(&gemm), &got)?;
        names.push(gemm.plan().name());
    }
    Ok(names)
}

/// A few small shapes, every path: quick enough under compute-sanitizer (tails in N and K, one
/// and several K steps per warp, every x tile; for the WGMMA kernel, one row, a partial N tile,
/// and M past a tile with more K blocks than ring stages; for the skinny kernel's wide form, a
/// partial W block and a partial second slab; for its class form, a partial cluster block and
/// rows of x past M in a CTA's share).
pub fn sanitize_small_shapes(gpu: &Arc<Gpu>) -> Check {
    let shapes = [
        (1, 1, 8),
        (3, 37, 264),
        (17, 70, 1000),
        (64, 9, 2056),
        (65, 33, 72),
        (1, 16, 64),
        (130, 48, 320),
        (130, 80, 512),
        (20, 100, 512),
        (100, 80, 1024),
    ];
    for (i, &(m, n, k)) in shapes.iter().enumerate() {
        every_path(gpu, GemmShape { m, n, k }, 40 + i as u64)?;
    }
    Ok(())
}

/// M in {1, 2, 3, 17, 64, 65, 128, 256} (two shapes each) and six drawn in 1 to 256, with N
/// drawn in 1 to 2500 and K in multiples of 8 up to 3072, fresh inputs each, every path.
pub fn drawn_shapes(gpu: &Arc<Gpu>) -> Check {
    let draw = Counter::new(0x6e33, 0);
    let mut ms: Vec<usize> = [1, 2, 3, 17, 64, 65, 128, 256].iter().flat_map(|&m| [m, m]).collect();
    ms.extend((0..6).map(|i| 1 + draw.below(256, &[1, i]) as usize));
    for (i, &m) in ms.iter().enumerate() {
        let idx = i as u64;
        let n = 1 + draw.below(2500, &[2, idx]) as usize;
        let k = 8 * (1 + draw.below(384, &[3, idx]) as usize);
        let shape = GemmShape { m, n, k };
        let names = every_path(gpu, shape, 1000 + idx)?;
        println!("  {shape}: {} ok", names.join(", "));
    }
    Ok(())
}

/// asynct-0.5b's weights at M = 1, 8, 32, 64 (skinny; cuBLASLt too) and 128, 512 (cuBLASLt),
/// one weight per shape and fresh x per M.
pub fn model_shapes(gpu: &Arc<Gpu>) -> Check {
    for (s, &(name, n, k)) in MODEL_SHAPES.iter().enumerate() {
        let seed = 2000 + 16 * s as u64;
        let w = draw_w(seed, n, k);
        let w_d = g(gpu.upload(&w))?;
        for (i, m) in [1usize, 8, 32, 64, 128, 512].into_iter().enumerate() {
            let shape = GemmShape { m, n, k };
            let x = draw_x(seed + 1 + i as u64, m, k);
            let reference = Reference::new(&x, &w, k);
            let x_d = g(gpu.upload(&x))?;
            let mut names = Vec::new();
            for plan in plans(gpu, shape)? {
                let gemm = g(Gemm::new(gpu, plan))?;
                let got = run(gpu, &gemm, &x_d, &w_d)?;
                reference.check(&format!("{name} {}", label(&gemm)), &got)?;
                names.push(label(&gemm));
            }
            println!("  {name} M {m}: {} ok", names.join(", "));
        }
    }
    Ok(())
}
