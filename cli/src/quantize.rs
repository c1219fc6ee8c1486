//! `engine-cli quantize`: writes a GGUF file with every weight matrix in one type, as
//! `llama-quantize --pure` does (the same bytes for the types both support).

use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use engine::gguf::GgmlType;
use engine::gguf::GgufFile;
use engine::quant::requantize::{file_type_of, quantize_pure};

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// The GGUF file to read.
    pub input: PathBuf,
    /// The file to write (replaced if it exists).
    pub output: PathBuf,
    /// The type of every weight matrix: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
    /// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS or MXFP4.
    #[arg(value_name = "TYPE")]
    pub ty: String,
}

pub fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let target = GgmlType::from_name(&args.ty).filter(|t| file_type_of(*t).is_some()).ok_or_else(|| {
        anyhow!("unknown or unsupported type {:?}: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4", args.ty)
    })?;
    let file_type = file_type_of(target).expect("checked above");
    let source = GgufFile::open(&args.input)?;
    let writer = quantize_pure(&source, target, file_type).with_context(|| args.input.display().to_string())?;
    // Written next to the output and renamed, so a failed run leaves no half file behind.
    let partial = args.output.with_extension("partial");
    let written = std::fs::File::create(&partial)
        .map_err(anyhow::Error::from)
        .and_then(|file| Ok(writer.write(BufWriter::new(file))?))
        .and_then(|written| Ok(std::fs::rename(&partial, &args.output).map(|()| written)?))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&partial);
        })
        .with_context(|| args.output.display().to_string())?;
    eprintln!("wrote {} ({written} bytes, matrices {target})", args.output.display());
    Ok(())
}
