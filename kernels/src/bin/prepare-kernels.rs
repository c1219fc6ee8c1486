//! `prepare-kernels DIR`: every kernel source compiled by NVRTC to CUBINs for sm_80 and sm_90
//! and to PTX for compute_80, written into DIR with ptxas's report (`kernels.tsv`), for a GPU
//! machine that has no NVRTC (`ENGINE_CUDA_MODULES=DIR`). Needs NVRTC here
//! (`tools/fetch-nvrtc.sh`).

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: prepare-kernels DIR");
        std::process::exit(2);
    };
    match kernels::prepared::write_all(std::path::Path::new(&dir)) {
        Ok(report) => {
            let lines = report.lines().count() - 1;
            let spilling = report.lines().skip(1).filter(|l| l.split('\t').nth(4).is_some_and(|s| s != "0")).count();
            println!("{lines} kernel builds written to {} ({spilling} spill)", std::path::Path::new(&dir).display());
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
