//! With the `host` feature: the CPU execution harness. Every `cuda/*.cu` is compiled as host
//! C++ (with `cuda/host.hpp` mapping the portability names to host threads), and each kernel
//! gets an exported launcher `kernels_host_<name>(grid, block, params)` that takes its arguments
//! the way CUDA's driver API does (an array of pointers to each argument). The Rust table of the
//! launchers is generated beside them.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// `KERNEL void name(type a, type b, ...)` lines of a source: (name, parameter types).
fn kernels(path: &Path) -> Vec<(String, Vec<String>)> {
    let code = std::fs::read_to_string(path).expect("read a kernel source");
    let mut out = Vec::new();
    for line in code.lines() {
        let Some(rest) = line.trim().strip_prefix("KERNEL void ") else { continue };
        let (name, params) = rest.split_once('(').expect("KERNEL void name(");
        let params = params.split_once(')').unwrap_or_else(|| panic!("{}: the parameters of {name} must be on one line", path.display())).0;
        let types = params
            .split(',')
            .map(|p| {
                let p = p.trim();
                // the type is everything before the parameter's name
                let cut = p.rfind([' ', '*']).expect("a typed parameter");
                p[..=cut].trim().to_string()
            })
            .collect();
        out.push((name.trim().to_string(), types));
    }
    out
}

fn main() {
    println!("cargo:rerun-if-changed=cuda");
    if std::env::var_os("CARGO_FEATURE_HOST").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let cuda = Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda");
    let mut sources: Vec<PathBuf> =
        std::fs::read_dir(&cuda).expect("cuda/").flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "cu")).collect();
    sources.sort();
    let mut build = cc::Build::new();
    // optimised even in debug builds (the harness runs whole models in the tests); no fast-math
    // and no contraction, so the arithmetic is the source's. A kernel's uninitialised locals
    // hold a pattern (0xFE bytes: floats near -1.7e38), not what the reused fiber stacks left
    // there (often the last block's same values), so that reading one before writing it shows
    // in the results as a GPU's garbage would.
    build
        .cpp(true)
        .std("c++20")
        .opt_level(2)
        .include(&cuda)
        .flag("-ffp-contract=off")
        .flag("-pthread")
        .flag("-ftrivial-auto-var-init=pattern")
        // every typed load and store checked against its type's alignment, as a GPU requires;
        // shifts by a count of at least the operand's width and float-to-integer conversions
        // out of range, which x86 and a GPU compute differently (host.cpp's handlers note each
        // as the launch's fault, the first kept for its report; no sanitizer runtime is linked)
        .flag("-fsanitize=alignment,shift-exponent,float-cast-overflow")
        .flag_if_supported("-Wno-unused-function");
    if std::env::var_os("CARGO_FEATURE_TSAN").is_some() {
        // the harness's own C++ (threads, barriers, shuffle slots, shared statics) instrumented;
        // the Rust around it is not, so only races among the kernel threads are reported
        build.flag("-fsanitize=thread").flag("-g").define("KERNELS_HOST_OS_THREADS", None);
        println!("cargo:rustc-link-lib=dylib=tsan");
    }
    build.file(cuda.join("host.cpp"));
    let mut table = String::from("unsafe extern \"C\" {\n");
    let mut entries = String::from("/// Every kernel's host launcher, by name.\npub(crate) const LAUNCHERS: &[(&str, Launcher)] = &[\n");
    for source in &sources {
        let mut cpp = format!(
            "#include \"{}\"\nnamespace host {{ int launch(Dim3 grid, Dim3 dim, const std::function<void()>& kernel); }}\n",
            source.display()
        );
        for (name, types) in kernels(source) {
            let args: Vec<String> = types.iter().enumerate().map(|(i, t)| format!("*({t}*)p[{i}]")).collect();
            writeln!(
                cpp,
                "extern \"C\" int kernels_host_{name}(const unsigned* g, const unsigned* b, void** p) {{\n    return host::launch(host::Dim3{{g[0], g[1], g[2]}}, host::Dim3{{b[0], b[1], b[2]}}, [&] {{ {name}({}); }});\n}}",
                args.join(", ")
            )
            .unwrap();
            writeln!(table, "    fn kernels_host_{name}(grid: *const u32, block: *const u32, params: *mut *mut core::ffi::c_void) -> i32;")
                .unwrap();
            writeln!(entries, "    (\"{name}\", kernels_host_{name}),").unwrap();
        }
        let stem = source.file_stem().expect("a file name").to_string_lossy().into_owned();
        let file = out.join(format!("host_{stem}.cpp"));
        std::fs::write(&file, cpp).expect("write a host source");
        build.file(file);
    }
    table.push_str("}\n\n");
    entries.push_str("];\n");
    std::fs::write(out.join("host_launchers.rs"), table + &entries).expect("write the launcher table");
    build.compile("kernels_host");
}
