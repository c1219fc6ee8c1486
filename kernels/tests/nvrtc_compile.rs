//! Every kernel source compiled by NVRTC (the pinned PyPI wheel, fetched by
//! `tools/fetch-nvrtc.sh`) for sm_80 (A100) and sm_90 (H100/H200), with the sm_80 compile's PTX
//! as compute_80's, into the prepared folder, with ptxas's resource report printed per kernel: a
//! compile error or warning, a kernel the report misses, a register spill, or registers too many
//! for the largest block its launcher uses fails the test. No GPU is needed.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use kernels::SOURCES;

/// Runs the repo's fetch script (idempotent; cached under ~/.cache/engine-assets).
fn fetch_nvrtc() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/fetch-nvrtc.sh");
    let out = Command::new("bash").arg(&script).output().expect("run tools/fetch-nvrtc.sh");
    assert!(out.status.success(), "fetch-nvrtc.sh failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// Every source compiled once per architecture, into the prepared folder (what
/// `tools/device-check.sh prepare` carries to a GPU machine): each CUBIN checked as it is made.
#[test]
fn every_kernel_compiles_for_sm_80_and_sm_90_without_spills_into_the_prepared_folder() {
    fetch_nvrtc();
    let mut problems = Vec::new();
    let dir = std::env::temp_dir().join(format!("prepared-kernels-all-{}", std::process::id()));
    let report = kernels::prepared::write_all_seeing(&dir, |source, arch, module| {
        assert!(module.cubin.starts_with(b"\x7fELF"), "{} {arch}: not an ELF image", source.name);
        if module.log.contains("warning") {
            problems.push(format!("{arch} {}: compiler warnings:\n{}", source.name, module.log));
        }
        let wanted = source.entry_points();
        assert!(!wanted.is_empty(), "{}: no kernels", source.name);
        for name in &wanted {
            let Some(k) = module.kernels.iter().find(|k| k.name == *name) else {
                problems.push(format!("{arch} {}: ptxas reported nothing for {name}:\n{}", source.name, module.log));
                continue;
            };
            let line = format!(
                "ptxas {arch} {:<16} {:<14} {:>3} registers, {:>4} B shared, {:>4} B stack, {} B spill stores, {} B spill loads\n",
                source.name, k.name, k.registers, k.shared, k.stack_frame, k.spill_stores, k.spill_loads
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
            // the largest block the launcher uses must fit the kernel's registers
            let (allowed, used) = (k.max_block_threads(), kernels::launch::max_block_threads(name));
            if allowed < used {
                problems.push(format!(
                    "{arch} {} {}: {} registers allow blocks of {allowed} threads; its launcher uses up to {used}",
                    source.name, k.name, k.registers
                ));
            }
            if k.spill_stores > 0 || k.spill_loads > 0 {
                problems
                    .push(format!("{arch} {} {}: spills ({} B stores, {} B loads)", source.name, k.name, k.spill_stores, k.spill_loads));
            }
        }
    });
    let report = match report {
        Ok(r) => r,
        Err(e) => panic!("{}\n{e}", problems.join("\n")),
    };
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for source in SOURCES {
        for arch in kernels::prepared::CUBIN_ARCHS {
            let cubin = kernels::prepared::read_packed(&kernels::prepared::module_path(&dir, source, arch)).unwrap();
            assert!(cubin.starts_with(b"\x7fELF"), "{} {arch}: not an ELF image", source.name);
            for name in source.entry_points() {
                assert!(report.lines().any(|l| l.starts_with(&format!("{}\t{name}\t{arch}\t", source.name))), "{name} {arch} not reported");
            }
        }
        // the PTX, unpacked, for a GPU newer than the CUBINs
        let Some(kernels::prepared::Prepared::Ptx(ptx)) = kernels::prepared::find(&dir, source, "sm_100") else {
            panic!("{}: no PTX for compute_80", source.name)
        };
        let ptx = String::from_utf8(ptx).expect("PTX is text");
        assert!(ptx.contains(".target sm_80"), "{}: PTX for compute_80", source.name);
        assert!(ptx.ends_with('\0'), "{}: PTX is handed to the driver as a C string", source.name);
        for name in source.entry_points() {
            assert!(ptx.contains(&format!(".entry {name}(")), "{}: {name} in the PTX", source.name);
        }
    }
    assert_eq!(std::fs::read_to_string(dir.join(kernels::prepared::REPORT)).unwrap(), report);
    std::fs::remove_dir_all(dir).unwrap();
}
