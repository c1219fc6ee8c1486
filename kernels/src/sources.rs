//! The kernel sources, embedded at build time, and the textual expansion of their
//! `#include "…"` lines (NVRTC is given one self-contained source; nothing is read from disk).

/// One `.cu` file: an op family's kernels.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// The file name, e.g. `norm.cu`.
    pub name: &'static str,
    pub code: &'static str,
}

macro_rules! embedded {
    ($($file:literal),* $(,)?) => {
        &[$(KernelSource { name: $file, code: include_str!(concat!("../cuda/", $file)) }),*]
    };
}

/// The headers a source may include.
pub const HEADERS: &[KernelSource] = embedded![
    "portable.cuh",
    "blocks.cuh",
    "q8.cuh",
    "kvcache.cuh",
    "iq_grid_tables.cuh",
    "iq_grid.cuh",
    "vecdot.cuh",
    "mulmat.cuh",
    "activation.cuh",
    "host.hpp"
];

/// Every kernel source.
pub const SOURCES: &[KernelSource] = embedded![
    "elementwise.cu",
    "norm.cu",
    "rope.cu",
    "activation.cu",
    "dequantize.cu",
    "quantize.cu",
    "kv.cu",
    "hadamard.cu",
    "recurrent.cu",
    "matvec.cu",
    "matmul.cu",
    "attention.cu",
    "staging.cu",
    "selftest.cu"
];

/// A kernel parameter's type, as a launch's 8-byte slot carries it (`runtime::Arg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// A device address (or 0 for a null pointer).
    Pointer,
    /// `int`, `int32_t`.
    Int,
    /// `int64_t`.
    Int64,
    /// `float`.
    Float,
}

/// Why a source could not be expanded.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{file}: #include \"{header}\" names no embedded header")]
pub struct UnknownHeader {
    pub file: String,
    pub header: String,
}

impl KernelSource {
    /// The kernels the source defines: the names of its `KERNEL void name(` lines.
    pub fn entry_points(&self) -> Vec<&'static str> {
        self.code.lines().filter_map(|l| l.trim().strip_prefix("KERNEL void ")).filter_map(|r| r.split('(').next()).map(str::trim).collect()
    }

    /// The parameters of kernel `name` as its `KERNEL void name(...)` line declares them (on one
    /// line, as `build.rs` reads them too); `None` when the source has no such kernel or a
    /// parameter of a type not in [`Param`].
    pub fn parameters(&self, name: &str) -> Option<Vec<Param>> {
        let rest =
            self.code.lines().find_map(|l| l.trim().strip_prefix("KERNEL void ")?.strip_prefix(name)?.trim_start().strip_prefix('('))?;
        let list = rest.split_once(')')?.0;
        list.split(',')
            .map(|p| {
                let p = p.trim();
                // the type is everything before the parameter's name
                let ty = p[..=p.rfind([' ', '*'])?].trim();
                Some(match ty {
                    t if t.ends_with('*') => Param::Pointer,
                    "int" | "int32_t" => Param::Int,
                    "int64_t" => Param::Int64,
                    "float" => Param::Float,
                    _ => return None,
                })
            })
            .collect()
    }

    /// The source with every `#include "header"` replaced by the header's own expansion, each
    /// header once (the headers are `#pragma once`), in order of first inclusion.
    pub fn expanded(&self) -> Result<String, UnknownHeader> {
        let mut done = Vec::new();
        let mut out = String::new();
        expand_into(self, &mut done, &mut out)?;
        Ok(out)
    }
}

fn expand_into(src: &KernelSource, done: &mut Vec<&'static str>, out: &mut String) -> Result<(), UnknownHeader> {
    for line in src.code.lines() {
        let include =
            line.trim().strip_prefix("#include").map(str::trim).and_then(|r| r.strip_prefix('"')).and_then(|r| r.strip_suffix('"'));
        match include {
            Some(name) => {
                let header = HEADERS
                    .iter()
                    .find(|h| h.name == name)
                    .ok_or_else(|| UnknownHeader { file: src.name.to_string(), header: name.to_string() })?;
                if !done.contains(&header.name) {
                    done.push(header.name);
                    expand_into(header, done, out)?;
                }
            }
            None if line.trim() == "#pragma once" => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_kernels_parameters_are_read_from_its_source() {
        for source in super::SOURCES {
            for name in source.entry_points() {
                let params = source.parameters(name).unwrap_or_else(|| panic!("{}: the parameters of {name}", source.name));
                assert!(!params.is_empty(), "{name}");
            }
        }
        let elementwise = super::SOURCES.iter().find(|s| s.name == "elementwise.cu").unwrap();
        use super::Param::*;
        assert_eq!(elementwise.parameters("add_scaled"), Some(vec![Pointer, Pointer, Float, Int64]));
        // a name that only begins another kernel's
        assert_eq!(elementwise.parameters("add"), None);
    }

    use super::*;

    #[test]
    fn includes_expand_once_and_unknown_headers_are_errors() {
        let norm = SOURCES.iter().find(|s| s.name == "norm.cu").expect("norm.cu");
        let text = norm.expanded().unwrap();
        // every quoted include is expanded (the host branch keeps its system includes, which
        // NVRTC's preprocessor skips)
        assert!(!text.contains("#include \""));
        assert_eq!(text.matches("DEVICE double warp_sum(").count(), 1);
        assert!(text.contains("KERNEL void rms_norm("));
        assert_eq!(norm.entry_points(), ["rms_norm", "add_rms_norm", "layer_norm"]);
        // blocks.cuh includes portable.cuh again: still once
        let both = KernelSource { name: "t.cu", code: "#include \"blocks.cuh\"\n#include \"portable.cuh\"\nx\n" };
        let text = both.expanded().unwrap();
        assert_eq!(text.matches("DEVICE double warp_sum(").count(), 1);
        assert!(text.contains("struct block_q4_0"));
        let bad = KernelSource { name: "bad.cu", code: "#include \"nope.cuh\"\n" };
        assert_eq!(bad.expanded(), Err(UnknownHeader { file: "bad.cu".into(), header: "nope.cuh".into() }));
    }
}
