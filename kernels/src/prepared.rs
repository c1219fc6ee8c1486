//! Kernels compiled ahead of time, for a GPU machine that has the driver and nothing else: every
//! source compiled here by NVRTC to a CUBIN per architecture (`sm_80`, `sm_90`), with the PTX of
//! the `sm_80` compile kept as `compute_80`'s (which the driver compiles for any later GPU), each
//! kept gzipped (a CUBIN to a third of its size, PTX to a tenth, so that the folder travels within
//! the device machine's limits), written into one folder with ptxas's resource report. The CUDA
//! runtime loads from that folder when `ENGINE_CUDA_MODULES` names it: the CUBIN of the GPU's own
//! architecture, else the PTX, else NVRTC as usual.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use crate::nvrtc::{compile, CompiledModule, NvrtcError};
use crate::sources::{KernelSource, SOURCES};

/// The real architectures CUBINs are written for (Ampere, Hopper).
pub const CUBIN_ARCHS: &[&str] = &["sm_80", "sm_90"];
/// The virtual architecture of the PTX fallback: the PTX NVRTC makes on the way to the first of
/// [`CUBIN_ARCHS`] (a compile for `compute_80` gives the same text; kept, not made a third time).
pub const PTX_ARCH: &str = "compute_80";
/// The variable naming the folder.
pub const MODULES_VAR: &str = "ENGINE_CUDA_MODULES";
/// The report's file name in the folder: one line per kernel and architecture.
pub const REPORT: &str = "kernels.tsv";

/// A source's file stem: `norm.cu` -> `norm`.
fn stem(source: &KernelSource) -> &'static str {
    source.name.strip_suffix(".cu").unwrap_or(source.name)
}

/// `DIR/<stem>.<arch>.cubin.gz` or `DIR/<stem>.<arch>.ptx.gz`.
pub fn module_path(dir: &Path, source: &KernelSource, arch: &str) -> PathBuf {
    let ext = if arch.starts_with("compute_") { "ptx.gz" } else { "cubin.gz" };
    dir.join(format!("{}.{arch}.{ext}", stem(source)))
}

/// How a source's module was found for a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prepared {
    /// A CUBIN of the GPU's own architecture.
    Cubin(Vec<u8>),
    /// PTX (NUL-terminated) the driver compiles.
    Ptx(Vec<u8>),
}

/// The prepared module of `source` for a GPU of `arch` (`sm_90`), if the folder holds one.
pub fn find(dir: &Path, source: &KernelSource, arch: &str) -> Option<Prepared> {
    if let Some(cubin) = read_packed(&module_path(dir, source, arch)) {
        return Some(Prepared::Cubin(cubin));
    }
    let ptx_major: u32 = PTX_ARCH.trim_start_matches("compute_").parse().ok()?;
    let gpu: u32 = arch.trim_start_matches("sm_").trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().ok()?;
    if gpu < ptx_major {
        return None;
    }
    read_packed(&module_path(dir, source, PTX_ARCH)).map(Prepared::Ptx)
}

/// A module's bytes from its file in the folder, unpacked; None without a readable one.
pub fn read_packed(path: &Path) -> Option<Vec<u8>> {
    let packed = std::fs::read(path).ok()?;
    let mut module = Vec::new();
    flate2::read::GzDecoder::new(&packed[..]).read_to_end(&mut module).ok()?;
    Some(module)
}

/// A module (CUBIN or PTX) as the folder keeps it (gzip).
pub fn pack(module: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(module).and_then(|()| gz.finish()).expect("gzip into memory")
}

/// The folder `ENGINE_CUDA_MODULES` names, if set.
pub fn folder() -> Option<PathBuf> {
    std::env::var_os(MODULES_VAR).filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// Compiles every source for [`CUBIN_ARCHS`] and [`PTX_ARCH`] into `dir`, with [`REPORT`];
/// returns the report's text.
pub fn write_all(dir: &Path) -> Result<String, PrepareError> {
    write_all_seeing(dir, |_, _, _| {})
}

/// [`write_all`], showing `see` each CUBIN's compiled module (the source, the architecture) as
/// it is written: what a test checks of every build without compiling it twice.
pub fn write_all_seeing(dir: &Path, mut see: impl FnMut(&KernelSource, &str, &CompiledModule)) -> Result<String, PrepareError> {
    std::fs::create_dir_all(dir).map_err(|e| PrepareError::Io(dir.display().to_string(), e.to_string()))?;
    let mut report = String::from("file\tkernel\tarch\tregisters\tspill_stores\tspill_loads\tstack_frame\tshared\n");
    let write =
        |path: PathBuf, bytes: &[u8]| std::fs::write(&path, bytes).map_err(|e| PrepareError::Io(path.display().to_string(), e.to_string()));
    for source in SOURCES {
        for arch in CUBIN_ARCHS {
            let module = compile(source, arch)?;
            for k in &module.kernels {
                let _ = writeln!(
                    report,
                    "{}\t{}\t{arch}\t{}\t{}\t{}\t{}\t{}",
                    source.name, k.name, k.registers, k.spill_stores, k.spill_loads, k.stack_frame, k.shared
                );
            }
            see(source, arch, &module);
            write(module_path(dir, source, arch), &pack(&module.cubin))?;
            if arch == &CUBIN_ARCHS[0] {
                write(module_path(dir, source, PTX_ARCH), &pack(&module.ptx))?;
            }
        }
    }
    write(dir.join(REPORT), report.as_bytes())?;
    Ok(report)
}

#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Nvrtc(#[from] NvrtcError),
    #[error("{0}: {1}")]
    Io(String, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpus_own_cubin_comes_first_then_the_ptx_for_newer_gpus() {
        let dir = std::env::temp_dir().join(format!("prepared-kernels-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let norm = SOURCES.iter().find(|s| s.name == "norm.cu").unwrap();
        std::fs::write(module_path(&dir, norm, "sm_90"), pack(b"cubin")).unwrap();
        std::fs::write(module_path(&dir, norm, PTX_ARCH), pack(b"ptx\0")).unwrap();
        assert_eq!(find(&dir, norm, "sm_90"), Some(Prepared::Cubin(b"cubin".to_vec())));
        assert_eq!(find(&dir, norm, "sm_120a"), Some(Prepared::Ptx(b"ptx\0".to_vec())));
        assert_eq!(find(&dir, norm, "sm_86"), Some(Prepared::Ptx(b"ptx\0".to_vec())));
        assert_eq!(find(&dir, norm, "sm_75"), None, "PTX of compute_80 cannot run on an older GPU");
        let rope = SOURCES.iter().find(|s| s.name == "rope.cu").unwrap();
        assert_eq!(find(&dir, rope, "sm_90"), None);
        assert_eq!(module_path(&dir, norm, "sm_80").file_name().unwrap(), "norm.sm_80.cubin.gz");
        assert_eq!(module_path(&dir, norm, PTX_ARCH).file_name().unwrap(), "norm.compute_80.ptx.gz");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
