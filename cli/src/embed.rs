//! `engine-cli embed`: one embedding vector per text, pooled and (by default) L2-normalised.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Context};
use engine::backend::Device;
use engine::embed::{embed, Pooling};
use engine::model::Model;
use serde_json::json;

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// The GGUF model (a BERT encoder such as all-MiniLM-L6-v2, or a decoder).
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The texts to embed, one vector each.
    #[arg(required = true)]
    pub texts: Vec<String>,
    /// How token states become one vector (default: the file's `<arch>.pooling_type`).
    #[arg(long, value_parser = ["mean", "cls", "last"])]
    pub pooling: Option<String>,
    /// Print the pooled vectors as they are, without scaling them to unit length.
    #[arg(long)]
    pub no_normalize: bool,
    /// Print one JSON object: {"model", "dim", "pooling", "normalized", "embeddings": [[...], ...]}.
    #[arg(long)]
    pub json: bool,
    /// Device: cpu, cuda or cuda:N (a build without CUDA refuses cuda with an error).
    #[arg(long, default_value = "cpu", value_parser = crate::load::parse_device)]
    pub device: Device,
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    let model = Model::load_on(&args.model, args.device)?;
    let pooling = match &args.pooling {
        Some(name) => Pooling::from_name(name).with_context(|| format!("unknown pooling {name:?}"))?,
        None => Pooling::of_model(&model)?,
    };
    if pooling == Pooling::None {
        bail!("the model's pooling type is none (one vector per token): choose --pooling mean, cls or last");
    }
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    let vectors = embed(&model, &texts, Some(pooling), !args.no_normalize)?;
    if args.json {
        let j = json!({
            "model": args.model.display().to_string(),
            "dim": model.config().n_embd,
            "pooling": pooling.name(),
            "normalized": !args.no_normalize,
            "embeddings": vectors.iter().map(|v| v.iter().map(|&x| short(x)).collect::<Vec<_>>()).collect::<Vec<_>>(),
        });
        println!("{j}");
    } else {
        // Shortest representation that reads back to the same f32: lossless and compact.
        let mut out = String::new();
        for v in &vectors {
            for (i, x) in v.iter().enumerate() {
                let sep = if i == 0 { "" } else { " " };
                write!(out, "{sep}{x}").expect("writing to a String");
            }
            out.push('\n');
        }
        print!("{out}");
    }
    Ok(())
}

/// `x` as the f64 nearest its shortest f32 decimal form, so that JSON prints `0.0367` rather
/// than the f32's exact binary value `0.03669999912381172`; it reads back to the same f32.
fn short(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}
