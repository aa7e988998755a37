//! The kernel cache on the GPU (issue 16's fast start): a cold cache compiles every kernel the
//! device runs to cubins, a process finding them compiles nothing and loads them all quickly,
//! and a damaged cubin is compiled again, never handed to the driver, and then loads and runs
//! its entries. The cache folder is a fresh one of this run. Without a GPU every check prints
//! that it was skipped (`verify::gpu_harness`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use gpu::kernels::{for_device, HP1_DECODE};
use gpu::Gpu;

/// Loading every cached kernel must leave most of issue 16's 3 s start for the rest.
const WARM_LOAD_LIMIT_S: f64 = 1.0;

fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("asynct-gpu-kernel-cache-{}", std::process::id()))
}

/// Loads every kernel on a fresh `Gpu` (a module table of its own); returns the kernels compiled
/// and the seconds it took.
fn load_all(gpu: &Gpu) -> Result<(Vec<&'static str>, f64), String> {
    let fresh = Gpu::new().map_err(|e| e.to_string())?;
    let mut compiled = Vec::new();
    let start = Instant::now();
    fresh
        .load_kernels(&for_device(gpu.info().compute_capability), &mut |_, _, k| compiled.push(k.name))
        .map_err(|e| e.to_string())?;
    Ok((compiled, start.elapsed().as_secs_f64()))
}

fn a_cold_cache_compiles_every_kernel_and_a_warm_one_none(gpu: &Arc<Gpu>) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(cache_dir());
    let kernels = for_device(gpu.info().compute_capability);
    let (cold, cold_s) = load_all(gpu)?;
    let (warm, warm_s) = load_all(gpu)?;
    println!("  {} kernels: cold {cold_s:.2} s (compiled {}), warm {warm_s:.3} s", kernels.len(), cold.len());
    if cold.len() != kernels.len() || !warm.is_empty() {
        return Err(format!(
            "compiled {cold:?} cold and {warm:?} warm; every one of {} cold, none warm",
            kernels.len()
        ));
    }
    if warm_s > WARM_LOAD_LIMIT_S {
        return Err(format!("loading the cached cubins took {warm_s:.2} s, over {WARM_LOAD_LIMIT_S} s"));
    }
    Ok(())
}

fn a_damaged_cubin_is_compiled_again_and_runs(gpu: &Arc<Gpu>) -> Result<(), String> {
    load_all(gpu)?;
    let stem = HP1_DECODE.name.trim_end_matches(".cu");
    let file = std::fs::read_dir(cache_dir())
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{stem}-"))))
        .ok_or("no cached hp1_decode cubin")?;
    let whole = std::fs::read(&file).map_err(|e| e.to_string())?;
    std::fs::write(&file, &whole[..whole.len() / 3]).map_err(|e| e.to_string())?;
    let (compiled, _) = load_all(gpu)?;
    if compiled != [HP1_DECODE.name] {
        return Err(format!("compiled {compiled:?} after cutting {}; only hp1_decode.cu expected", file.display()));
    }
    if std::fs::read(&file).map_err(|e| e.to_string())?.len() != whole.len() {
        return Err("the recompiled cubin was not stored whole".into());
    }
    // The recompiled module loads and its entries resolve.
    let cubin = gpu::runtime::kernel_cache::compile(&HP1_DECODE, gpu.arch()).map_err(|e| e.to_string())?;
    let entries = gpu::runtime::cubin::functions(&cubin)?;
    let kernels: Vec<&String> = entries.iter().filter(|e| e.starts_with("hp1_")).take(4).collect();
    if kernels.is_empty() {
        return Err(format!("no hp1_ entry among the cubin's functions {entries:?}"));
    }
    let fresh = Gpu::new().map_err(|e| e.to_string())?;
    for entry in kernels {
        fresh.function(&HP1_DECODE, entry).map_err(|e| format!("{entry}: {e}"))?;
    }
    Ok(())
}

fn main() {
    // Before any kernel is compiled, and while this process has one thread.
    std::env::set_var("ASYNCT_KERNEL_CACHE", cache_dir());
    verify::gpu_harness::run(
        "gpu_kernel_cache",
        &[
            (
                "a_cold_cache_compiles_every_kernel_and_a_warm_one_none",
                a_cold_cache_compiles_every_kernel_and_a_warm_one_none,
            ),
            ("a_damaged_cubin_is_compiled_again_and_runs", a_damaged_cubin_is_compiled_again_and_runs),
        ],
    )
}
