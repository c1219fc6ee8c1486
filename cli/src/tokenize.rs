//! `engine-cli tokenize`: the token ids and pieces of a text under a GGUF's tokenizer.

use std::path::PathBuf;

use anyhow::{bail, Context};
use engine::gguf::GgufFile;
use engine::tokenizer::{TokenId, Tokenizer};
use serde_json::json;

use crate::load::text_or_file;

#[derive(clap::Args)]
pub struct TokenizeArgs {
    /// The GGUF file whose tokenizer to use (a model, or a vocab-only file).
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// The text to tokenize (or use --file).
    #[arg(required_unless_present = "file")]
    pub text: Option<String>,
    /// Read the text from a file instead ("-" for standard input).
    #[arg(long, short = 'f', conflicts_with = "text")]
    pub file: Option<PathBuf>,
    /// Print only the ids, as a list: [2, 9259, 1902].
    #[arg(long, group = "format")]
    pub ids: bool,
    /// Print only the pieces, one per line.
    #[arg(long, group = "format")]
    pub pieces: bool,
    /// Print one JSON object: {"ids": [...], "pieces": [...]}.
    #[arg(long, group = "format")]
    pub json: bool,
    /// Print only the number of tokens.
    #[arg(long, group = "format")]
    pub count: bool,
    /// Tokenize special-token text such as "<start_of_turn>" as plain text.
    #[arg(long)]
    pub no_special: bool,
    /// Add no BOS (nor any EOS, [CLS] or [SEP] the vocabulary adds around a text), as
    /// llama-tokenize --no-bos does.
    #[arg(long)]
    pub no_bos: bool,
}

pub fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.model)?;
    let tokenizer = Tokenizer::from_gguf(&file).with_context(|| format!("{}", args.model.display()))?;
    let Some(text) = text_or_file(args.text.as_deref(), args.file.as_deref())? else {
        bail!("no text given (pass it as an argument or use --file)")
    };
    let ids = tokenizer.encode(&text, !args.no_bos, !args.no_special);
    let pieces: Vec<String> = ids.iter().map(|&id| piece(&tokenizer, id)).collect();
    if args.json {
        println!("{}", json!({ "ids": ids, "pieces": pieces }));
    } else if args.ids {
        println!("{ids:?}");
    } else if args.pieces {
        for p in &pieces {
            println!("{p}");
        }
    } else if args.count {
        println!("{}", ids.len());
    } else {
        for (id, p) in ids.iter().zip(&pieces) {
            println!("{id:>7} -> '{p}'");
        }
    }
    Ok(())
}

/// The text of a token; a byte token that is part of a UTF-8 character is shown as `<0xNN>`.
pub(crate) fn piece(tokenizer: &Tokenizer, id: TokenId) -> String {
    let bytes = tokenizer.token_bytes(id);
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => bytes.iter().map(|b| format!("<0x{b:02X}>")).collect(),
    }
}
