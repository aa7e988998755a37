//! Kernel sources, compiled by NVRTC to cubins at run time and cached on disk.
//!
//! A kernel is a `.cu` file embedded in the binary. It is compiled straight to machine code for
//! the device's architecture (`sm_90a` on Hopper, so wgmma is available) the first time it is
//! needed, and the cubin is kept under the cache folder keyed by a hash of the source, the
//! options, the architecture, the NVRTC version and the driver's version, so a changed kernel is
//! never served stale, an unchanged one compiles once per machine, and no process JIT-compiles
//! PTX. The cache folder is `$ASYNCT_KERNEL_CACHE`, else `$XDG_CACHE_HOME/asynct/kernels`, else
//! `~/.cache/asynct/kernels`, else the system temp folder.
//!
//! A cache file is a 32-byte header (magic, key, length, checksum of the cubin), then the cubin.
//! A file that is cut short, overwritten or meant for another key reads as a miss and is
//! compiled again, never handed to the driver; files are written through a temporary file and a
//! rename, so a reader never sees half of one even when several processes compile at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{cubin, nvrtc};
use crate::error::{Error, Result};

/// One `.cu` file of this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    /// File name, for messages and cache keys.
    pub name: &'static str,
    /// The CUDA C++ source.
    pub source: &'static str,
}

/// Whether an NVRTC library can be loaded here (it can on a machine with only the CUDA
/// toolkit's NVRTC installed, no driver: enough to compile every kernel and check it).
pub fn nvrtc_available() -> bool {
    // SAFETY: it only tries to dlopen libnvrtc and reports whether that worked.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The options every kernel is compiled with. Fast-math is off: the gate and the norms must
/// match the oracle's IEEE arithmetic, and `--fmad=false` is not set because FMA contraction
/// changes results only by rounding, within the SPEC's bounds.
fn options() -> Vec<String> {
    let mut opts = vec!["--std=c++17".to_string(), "-default-device".to_string()];
    opts.extend(include_paths().into_iter().map(|p| format!("--include-path={p}")));
    opts.extend(super::step_trace::compile_options());
    opts
}

/// Compiles `kernel` for `arch` (e.g. `sm_90a`), through the disk cache, and returns its cubin.
pub fn compile(kernel: &Kernel, arch: &str) -> Result<Vec<u8>> {
    compile_reporting(kernel, arch, &mut || {})
}

/// [`compile`], calling `before_compile` first when the cache misses and NVRTC is about to run
/// (so a loader can say which kernel the first start is waiting for).
pub fn compile_reporting(kernel: &Kernel, arch: &str, before_compile: &mut dyn FnMut()) -> Result<Vec<u8>> {
    if !nvrtc_available() {
        return Err(Error::NoNvrtc);
    }
    compile_in(&cache_dir(), kernel, arch, &Versions::here(), before_compile)
}

/// The cache folder, as the module's doc gives it.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("ASYNCT_KERNEL_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("asynct").join("kernels")
}

fn compile_in(
    dir: &Path,
    kernel: &Kernel,
    arch: &str,
    versions: &Versions,
    before_compile: &mut dyn FnMut(),
) -> Result<Vec<u8>> {
    let opts = options();
    let key = cache_key(kernel, arch, &opts, versions);
    let path = dir.join(format!("{}-{arch}-{key:016x}.cubin", kernel.name.trim_end_matches(".cu")));
    if let Some(image) = read(&path, key) {
        return Ok(image);
    }
    before_compile();
    let image = nvrtc::compile_cubin(kernel, arch, &opts)?;
    store(&path, key, &image)?;
    Ok(image)
}

/// CUDA's headers (cuda_bf16.h) are built into NVRTC; `$CUDA_HOME/include` is added when set, for
/// toolkits whose NVRTC expects them on disk.
fn include_paths() -> Vec<String> {
    std::env::var("CUDA_HOME").map(|h| vec![format!("{h}/include")]).unwrap_or_default()
}

/// The versions of the tools a cubin depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Versions {
    /// NVRTC's `major.minor`.
    nvrtc: String,
    /// `cuDriverGetVersion`'s number (13000 for CUDA 13.0), or `none` on a machine without a
    /// driver (one that only compiles).
    driver: String,
}

impl Versions {
    /// This machine's; NVRTC must be known to load.
    fn here() -> Self {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: nvrtcVersion writes two ints; NVRTC was checked to load.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        let mut driver = "none".to_string();
        // SAFETY: the presence check only tries to dlopen libcuda; cuDriverGetVersion writes one
        // int and needs no initialised driver.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            let mut v = 0;
            if unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) }.result().is_ok() {
                driver = v.to_string();
            }
        }
        Self { nvrtc: format!("{major}.{minor}"), driver }
    }
}

/// FNV-1a over everything that changes the cubin or whether this driver takes it.
fn cache_key(kernel: &Kernel, arch: &str, options: &[String], versions: &Versions) -> u64 {
    let options = options.join(" ");
    let parts = [kernel.name, kernel.source, arch, &options, &versions.nvrtc, &versions.driver];
    fnv1a(parts.iter().flat_map(|p| p.bytes().chain([0u8])))
}

fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The first bytes of every cache file (the format's version is its last byte).
const MAGIC: [u8; 8] = *b"asyncTc1";
const HEADER: usize = 32;

fn envelope(key: u64, image: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + image.len());
    out.extend(MAGIC);
    out.extend(key.to_le_bytes());
    out.extend((image.len() as u64).to_le_bytes());
    out.extend(fnv1a(image.iter().copied()).to_le_bytes());
    out.extend(image);
    out
}

/// The cubin stored at `path` for `key`, or `None` when there is none or it is not whole.
fn read(path: &Path, key: u64) -> Option<Vec<u8>> {
    let mut bytes = std::fs::read(path).ok()?;
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if bytes.len() < HEADER || bytes[..8] != MAGIC || word(8) != key || word(16) != (bytes.len() - HEADER) as u64 {
        return None;
    }
    let sum = word(24);
    let image = bytes.split_off(HEADER);
    (fnv1a(image.iter().copied()) == sum && cubin::check(&image).is_ok()).then_some(image)
}

/// Writes through a temporary file of this process and call, then renames it into place.
fn store(path: &Path, key: u64, image: &[u8]) -> Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let cache_err = |source| Error::Cache { path: path.display().to_string(), source };
    let dir = path.parent().expect("cache files live in a folder");
    std::fs::create_dir_all(dir).map_err(cache_err)?;
    let tmp = path.with_extension(format!("tmp{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let written = std::fs::write(&tmp, envelope(key, image)).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(cache_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::cubin::tests::tiny_cubin;

    const K: Kernel = Kernel { name: "k.cu", source: "extern \"C\" __global__ void k() {}" };

    fn versions(nvrtc: &str, driver: &str) -> Versions {
        Versions { nvrtc: nvrtc.into(), driver: driver.into() }
    }

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("asynct-kernel-cache-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_cache_key_changes_with_source_arch_options_nvrtc_and_driver() {
        let v = versions("13.0", "13000");
        let base = cache_key(&K, "sm_90a", &options(), &v);
        let other = Kernel { source: "extern \"C\" __global__ void k() { }", ..K };
        assert_ne!(base, cache_key(&other, "sm_90a", &options(), &v));
        assert_ne!(base, cache_key(&Kernel { name: "j.cu", ..K }, "sm_90a", &options(), &v));
        assert_ne!(base, cache_key(&K, "sm_80", &options(), &v));
        assert_ne!(base, cache_key(&K, "sm_90a", &["-G".to_string()], &v));
        assert_ne!(base, cache_key(&K, "sm_90a", &options(), &versions("13.1", "13000")));
        assert_ne!(base, cache_key(&K, "sm_90a", &options(), &versions("13.0", "13020")));
        assert_ne!(base, cache_key(&K, "sm_90a", &options(), &versions("13.0", "none")));
        assert_eq!(base, cache_key(&K, "sm_90a", &options(), &versions("13.0", "13000")));
        // The parts are separated, so moving a byte from one to the next changes the key.
        assert_ne!(
            cache_key(&K, "sm_90a", &[], &versions("13.0", "1")),
            cache_key(&K, "sm_90a", &[], &versions("13.01", ""))
        );
    }

    #[test]
    fn a_stored_cubin_reads_back_and_a_damaged_one_reads_as_a_miss() {
        let dir = scratch("damaged");
        let path = dir.join("k-sm_90a-0000000000000001.cubin");
        let image = tiny_cubin();
        store(&path, 1, &image).unwrap();
        assert_eq!(read(&path, 1), Some(image.clone()));
        assert_eq!(read(&path, 2), None, "another key's file");
        let whole = std::fs::read(&path).unwrap();
        let mut damaged: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("header only", whole[..HEADER].to_vec()),
            ("cut by a byte", whole[..whole.len() - 1].to_vec()),
            ("a byte more", [whole.as_slice(), &[0]].concat()),
            ("old PTX", b"//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n".to_vec()),
        ];
        let mut flipped = whole.clone();
        *flipped.last_mut().unwrap() ^= 1;
        damaged.push(("a flipped byte", flipped));
        // A checksum that matches bytes which are no cubin: the ELF check refuses them.
        damaged.push(("not an ELF", envelope(1, b"not an ELF image, not at all")));
        for (what, bytes) in damaged {
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(read(&path, 1), None, "{what}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn concurrent_writers_leave_one_whole_file_and_readers_never_see_part_of_one() {
        let dir = scratch("concurrent");
        let path = dir.join("k-sm_90a-0000000000000007.cubin");
        let image = tiny_cubin();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        store(&path, 7, &image).unwrap();
                        assert_eq!(read(&path, 7).as_ref(), Some(&image), "a reader right after a write");
                    }
                });
                s.spawn(|| {
                    for _ in 0..200 {
                        if let Some(got) = read(&path, 7) {
                            assert_eq!(got, image);
                        }
                    }
                });
            }
        });
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![path.file_name().unwrap().to_owned()], "no temporary file is left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_miss_compiles_a_damaged_file_is_compiled_again_and_a_hit_compiles_nothing() {
        if !nvrtc_available() {
            println!("SKIPPED: no NVRTC library here (scripts/local-nvrtc.sh installs one)");
            return;
        }
        let dir = scratch("compile");
        let v = Versions::here();
        let mut compiles = 0;
        let first = compile_in(&dir, &K, "sm_90a", &v, &mut || compiles += 1).unwrap();
        assert_eq!(cubin::functions(&first).unwrap(), vec!["k".to_string()]);
        assert_eq!(compile_in(&dir, &K, "sm_90a", &v, &mut || compiles += 1).unwrap(), first);
        assert_eq!(compiles, 1, "the second call is a hit");
        let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
        let whole = std::fs::read(&file).unwrap();
        std::fs::write(&file, &whole[..whole.len() / 2]).unwrap();
        assert_eq!(compile_in(&dir, &K, "sm_90a", &v, &mut || compiles += 1).unwrap(), first);
        assert_eq!((compiles, std::fs::read(&file).unwrap()), (2, whole), "recompiled and rewritten whole");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
