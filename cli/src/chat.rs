//! `engine-cli chat`: an interactive conversation rendered with the model's own chat template,
//! the reply streamed as it is generated. Each line of input is one user turn; the KV cache
//! keeps the conversation, so a turn only computes what is new. Input that is not a terminal
//! (a pipe, a file) is read the same way, one turn per line, without prompts.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use engine::chat::{tokenize_rendered, ChatInput, ChatTemplate};
use engine::generate::{GenerateParams, Generator};
use engine::kv_cache::common_prefix;
use engine::model::LoraSchedule;
use engine::tokenizer::TokenId;
use serde_json::{json, Value};

use crate::load::{default_ctx, load_model, thread_pool, RuntimeArgs};
use crate::sampling_args::SamplingArgs;

#[derive(clap::Args)]
pub struct ChatArgs {
    /// The GGUF model to talk to (its `tokenizer.chat_template` formats the conversation;
    /// ChatML when it has none).
    #[arg(long, short = 'm')]
    pub model: PathBuf,
    /// A system message that starts the conversation.
    #[arg(long)]
    pub system: Option<String>,
    /// The most tokens per reply [default: until the model ends its turn or the context is full].
    #[arg(short = 'n', long = "n-predict")]
    pub n_predict: Option<usize>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    let pool = thread_pool(args.runtime.threads)?;
    let mut model = load_model(&args.model, args.runtime.device)?;
    args.runtime.lora.load_into(&mut model)?;
    let sampling = args.sampling.params(model.tokenizer().n_vocab())?;
    let template = ChatTemplate::from_model(&model).context("the model's chat template")?;
    if template.is_fallback() {
        eprintln!("the model has no chat template: using ChatML");
    }
    let n_ctx = args.runtime.ctx_size.unwrap_or_else(|| default_ctx(&model));
    let mut kv = model.new_kv_cache(args.runtime.kv.types(), n_ctx);
    let mut in_cache: Vec<TokenId> = Vec::new();
    // the adapters the cached positions ran with
    let mut in_cache_lora = LoraSchedule::default();
    let mut messages: Vec<Value> = Vec::new();
    if let Some(system) = &args.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("context {n_ctx} tokens; an empty line is skipped, Ctrl-D ends the chat");
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout();
    let mut turn = 0u64;
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(json!({"role": "user", "content": line}));
        let input = ChatInput { add_generation_prompt: true, ..ChatInput::new(messages.clone()) };
        let prompt = tokenize_rendered(model.tokenizer(), &template.render(&input)?);
        if prompt.len() >= n_ctx {
            anyhow::bail!("the conversation ({} tokens) no longer fits the context of {n_ctx}; use a larger --ctx-size", prompt.len());
        }
        // keep what the cache shares with the new prompt (usually the whole conversation so far;
        // with an activated adapter, up to where the last turn activated it)
        let lora = model.default_schedule(&prompt);
        let keep = common_prefix(&in_cache, &prompt).min(in_cache_lora.agrees_for(&lora));
        kv.truncate(0, keep);
        let params = GenerateParams {
            // each turn draws differently, but the whole chat repeats for a given seed
            sampling: engine::sampling::SamplingParams { seed: sampling.seed.wrapping_add(turn), ..sampling.clone() },
            max_tokens: args.n_predict.unwrap_or(n_ctx - prompt.len()),
            stop: args.sampling.stop.clone(),
            ..GenerateParams::default()
        };
        turn += 1;
        let reply = pool.install(|| -> anyhow::Result<_> {
            let mut generator = Generator::new(&model, &mut kv, 0, &prompt, params)?;
            for event in generator.by_ref() {
                let event = event?;
                out.write_all(event.text.as_bytes()).and_then(|()| out.flush()).context("writing to standard output")?;
            }
            Ok(generator.complete()?)
        })?;
        writeln!(out).context("writing to standard output")?;
        let mut all = prompt;
        all.extend_from_slice(&reply.tokens);
        all.truncate(kv.seq_len(0));
        in_cache = all;
        in_cache_lora = lora;
        messages.push(json!({"role": "assistant", "content": reply.text}));
    }
    if interactive {
        eprintln!();
    }
    Ok(())
}
