//! llama-server's `GET /props`: a generating model's properties as llama-server's web page and
//! its clients read them (`?model=ID` names one when several generate): the context of a
//! sequence, the sequences decoded at once, the sampling a request gets by default, its chat
//! template with the BOS and EOS texts, and whether it reads images.

use engine::sampling::SamplingParams;
use hyper::Response;
use serde_json::json;

use crate::error::ApiError;
use crate::http::{ok_json, Body};
use crate::requests::llama_completion::MEDIA_MARKER;
use crate::AppState;

pub fn props(state: &AppState, model: Option<&str>) -> Result<Response<Body>, ApiError> {
    let entry = state.registry.named_or_only(model, true)?;
    let tokenizer = entry.model.tokenizer();
    let text_of = |id: Option<u32>| String::from_utf8_lossy(id.and_then(|t| tokenizer.token_text(t)).unwrap_or_default()).into_owned();
    // the defaults a request that names nothing runs with (OpenAI's: no cuts, temperature 1)
    let d = SamplingParams::default();
    let params = json!({
        "n_predict": -1,
        "seed": -1,
        "temperature": d.temperature,
        "top_k": d.top_k,
        "top_p": d.top_p,
        "min_p": d.min_p,
        "repeat_penalty": d.repetition_penalty,
        "presence_penalty": d.presence_penalty,
        "frequency_penalty": d.frequency_penalty,
        "n_probs": 0,
        "stop": [],
        "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
    });
    let path = entry.source.as_ref().map(|s| s.path.display().to_string()).unwrap_or_default();
    Ok(ok_json(&json!({
        "default_generation_settings": {"params": params, "n_ctx": entry.n_ctx},
        "total_slots": entry.worker.config().parallel,
        "model_alias": entry.id,
        "model_path": path,
        "modalities": {"vision": entry.vision.is_some(), "video": false, "audio": false},
        "media_marker": MEDIA_MARKER,
        "endpoint_slots": false,
        "endpoint_props": false,
        "endpoint_metrics": true,
        "chat_template": entry.worker.template().source(),
        "bos_token": text_of(tokenizer.bos()),
        "eos_token": text_of(tokenizer.eos()),
        "build_info": crate::FINGERPRINT,
        "is_sleeping": false,
    })))
}
