//! The served OpenAPI document: `openapi.yaml` as written, narrowed to this server — the model
//! id schemas become enums of the loaded models, and routes that are off (the guard without a
//! guard model, transcriptions without a backend, reranking without a reranker, loading models
//! without a models directory) are left out.

use crate::AppState;

/// The document as written (every route, free-form model ids); valid OpenAPI 3.2 (3.2 for
/// `itemSchema`, which describes each SSE event of a stream and the chunk JSON inside it).
pub const OPENAPI: &str = include_str!("../openapi.yaml");

pub fn document(state: &AppState) -> String {
    let models = state.registry.list();
    let ids = |keep: &dyn Fn(&crate::registry::ModelEntry) -> bool| -> Vec<String> {
        models.iter().filter(|m| keep(m)).map(|m| m.id.clone()).collect()
    };
    let mut all = ids(&|_| true);
    all.extend(state.transcription_model_id().map(str::to_string));
    let mut doc = OPENAPI.to_string();
    let rerankers = ids(&|m| engine::rerank::is_reranker(&m.model));
    let any_reranker = !rerankers.is_empty();
    for (name, list) in
        [("ModelId", all), ("ChatModelId", ids(&|m| m.generates)), ("GuardModelId", ids(&|m| m.guard)), ("RerankModelId", rerankers)]
    {
        if !list.is_empty() {
            let enumerated = serde_json::to_string(&list).expect("strings serialise");
            doc = doc.replace(
                &format!("    {name}: {{type: string, minLength: 1}}"),
                &format!("    {name}: {{type: string, enum: {enumerated}}}"),
            );
        }
    }
    if !state.registry.has_guard() {
        for path in ["/v1/guard", "/v1/guard/scan", "/v1/guard/batch", "/v1/guard/policies", "/v1/moderations"] {
            doc = without_path(&doc, path);
        }
    }
    if !state.has_transcriber() {
        doc = without_path(&doc, "/v1/audio/transcriptions");
    }
    // the route answers every model (a 400 for one that is no reranker); the document offers it
    // only where a reranker is loaded
    if !any_reranker {
        doc = without_path(&doc, "/v1/rerank");
    }
    // adapter ids the loaded models have; without any, no choice is valid
    let adapters = models.iter().map(|m| m.adapters.len()).max().unwrap_or(0);
    let id_line = r#"        id: {type: integer, minimum: 0, description: "an adapter's id (GET /lora-adapters)"}"#;
    if adapters == 0 {
        doc = without_operation(&doc, "/lora-adapters", "post");
        doc = doc.replace(
            "      items: {$ref: \"#/components/schemas/LoraChoice\"}\n",
            "      maxItems: 0\n      items: {$ref: \"#/components/schemas/LoraChoice\"}\n",
        );
    } else {
        doc = doc.replace(id_line, &id_line.replace("minimum: 0,", &format!("minimum: 0, maximum: {},", adapters - 1)));
    }
    if !state.loader.loads() {
        doc = without_operation(&doc, "/v1/models", "post");
    }
    doc
}

/// `doc` without the `method` operation of `path` (its line and the lines indented under it).
fn without_operation(doc: &str, path: &str, method: &str) -> String {
    let (header, operation) = (format!("  {path}:"), format!("    {method}:"));
    let mut out = String::with_capacity(doc.len());
    let (mut in_path, mut skipping) = (false, false);
    for line in doc.lines() {
        if line.starts_with("  /") || !line.starts_with(' ') {
            in_path = line == header;
        }
        if skipping && !line.starts_with("     ") {
            skipping = false;
        }
        if in_path && line == operation {
            skipping = true;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `doc` without the block of `path` under `paths:` (from its line to the next path or
/// top-level key).
fn without_path(doc: &str, path: &str) -> String {
    let header = format!("  {path}:");
    let mut out = String::with_capacity(doc.len());
    let mut skipping = false;
    for line in doc.lines() {
        if line == header {
            skipping = true;
            continue;
        }
        if skipping && (line.starts_with("  /") || !line.starts_with(' ')) {
            skipping = false;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_block_is_removed_whole() {
        let doc = "paths:\n  /a:\n    get: {}\n  /b:\n    post:\n      x: 1\n  /c:\n    get: {}\ncomponents: {}\n";
        assert_eq!(without_path(doc, "/b"), "paths:\n  /a:\n    get: {}\n  /c:\n    get: {}\ncomponents: {}\n");
        assert_eq!(without_path(doc, "/c"), "paths:\n  /a:\n    get: {}\n  /b:\n    post:\n      x: 1\ncomponents: {}\n");
    }

    #[test]
    fn an_operation_is_removed_whole_and_only_from_its_path() {
        let doc = "paths:\n  /a:\n    get: {}\n    post:\n      x: 1\n  /b:\n    post:\n      y: 2\ncomponents: {}\n";
        assert_eq!(without_operation(doc, "/a", "post"), "paths:\n  /a:\n    get: {}\n  /b:\n    post:\n      y: 2\ncomponents: {}\n");
    }
}
