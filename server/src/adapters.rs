//! A model's LoRA adapters as the server offers them, as llama-server does: the adapters loaded
//! at start (`--lora FILE[:SCALE]`) with their global scales, which `POST /lora-adapters`
//! changes, and a request's `lora` list resolved into the engine's (the listed ids at their
//! scales, the others off; without a list, the global scales).

use std::sync::RwLock;

use engine::model::{AdapterInfo, LoraScale, Model};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;

/// One `{"id", "scale"}` of a request's `lora` or of `POST /lora-adapters`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraChoice {
    #[serde(deserialize_with = "crate::requests::whole_number")]
    pub id: Option<u64>,
    pub scale: f64,
}

pub struct Adapters {
    loaded: Vec<AdapterInfo>,
    /// An activated adapter's invocation tokens as text, by id (empty for a plain one).
    invocations: Vec<String>,
    /// The global scale of each adapter, by id.
    scales: RwLock<Vec<f32>>,
}

impl Adapters {
    /// `model`'s adapters, at the scales it runs with by default.
    pub fn of(model: &Model) -> Adapters {
        let scales = (0..model.adapters().len()).map(|id| model.default_scale(id).unwrap_or(0.0)).collect();
        let invocations = model.adapters().iter().map(|a| model.tokenizer().decode(&a.invocation)).collect();
        Adapters { loaded: model.adapters().to_vec(), invocations, scales: RwLock::new(scales) }
    }

    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty()
    }

    pub fn len(&self) -> usize {
        self.loaded.len()
    }

    /// `GET /lora-adapters`: llama-server's `{id, path, scale}` per adapter, with its name, alpha
    /// and rank, and an activated one's `alora_invocation_tokens` and `alora_invocation_string`.
    pub fn describe(&self) -> Value {
        let scales = self.scales.read().expect("scales lock");
        let list: Vec<Value> = self
            .loaded
            .iter()
            .zip(scales.iter())
            .enumerate()
            .map(|(id, (a, scale))| {
                let mut entry = json!({"id": id, "path": a.path, "name": a.name, "scale": scale, "alpha": a.alpha, "rank": a.rank});
                if a.is_activated() {
                    entry["alora_invocation_tokens"] = json!(a.invocation);
                    entry["alora_invocation_string"] = json!(self.invocations[id]);
                }
                entry
            })
            .collect();
        Value::Array(list)
    }

    /// The scales `choices` give, by id (the adapters they leave out at 0), checked under
    /// `param`: each id loaded and named once, each scale finite.
    fn scales_of(&self, choices: &[LoraChoice], param: &str) -> Result<Vec<f32>, ApiError> {
        let mut scales = vec![None; self.loaded.len()];
        for (i, c) in choices.iter().enumerate() {
            let id = c.id.ok_or_else(|| ApiError::missing(&format!("{param}[{i}].id")))?;
            let slot = usize::try_from(id).ok().and_then(|id| scales.get_mut(id)).ok_or_else(|| {
                ApiError::invalid_param(param, format!("{param}[{i}]: adapter {id} is not loaded ({} are: ids from 0)", self.loaded.len()))
            })?;
            if slot.is_some() {
                return Err(ApiError::invalid_param(param, format!("{param}[{i}]: adapter {id} is named twice")));
            }
            let scale = c.scale as f32;
            if !scale.is_finite() {
                return Err(ApiError::invalid_param(param, format!("{param}[{i}].scale must be a finite number")));
            }
            *slot = Some(scale);
        }
        Ok(scales.into_iter().map(|s| s.unwrap_or(0.0)).collect())
    }

    /// `POST /lora-adapters`: the new global scales (adapters left out go to 0).
    pub fn set(&self, choices: &[LoraChoice]) -> Result<(), ApiError> {
        let scales = self.scales_of(choices, "adapters")?;
        *self.scales.write().expect("scales lock") = scales;
        Ok(())
    }

    /// The adapters a request's `lora` chooses, if it has one (a guard's prompts run with the
    /// model's own start scales otherwise).
    pub fn resolve_chosen(&self, request: Option<&[LoraChoice]>) -> Result<Option<Vec<LoraScale>>, ApiError> {
        request.map(|choices| self.resolve(Some(choices))).transpose()
    }

    /// The adapters a generation runs with: the request's `lora` when it has one, else the
    /// global scales; in id order, those at 0 left out (so that requests running the same
    /// adapters share their cached prefixes).
    pub fn resolve(&self, request: Option<&[LoraChoice]>) -> Result<Vec<LoraScale>, ApiError> {
        let scales = match request {
            Some(choices) => self.scales_of(choices, "lora")?,
            None => self.scales.read().expect("scales lock").clone(),
        };
        Ok(scales.into_iter().enumerate().filter(|&(_, s)| s != 0.0).map(|(adapter, scale)| LoraScale { adapter, scale }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapters(n: usize, scales: &[f32]) -> Adapters {
        let info = AdapterInfo { name: "a".into(), path: None, alpha: 0.0, rank: 4, tensors: 1, invocation: Vec::new() };
        Adapters { loaded: vec![info; n], invocations: vec![String::new(); n], scales: RwLock::new(scales.to_vec()) }
    }

    fn choice(id: u64, scale: f64) -> LoraChoice {
        LoraChoice { id: Some(id), scale }
    }

    #[test]
    fn a_request_list_replaces_the_global_scales_and_leaves_out_the_rest() {
        let a = adapters(3, &[1.0, 0.0, 0.5]);
        let global = a.resolve(None).unwrap();
        assert_eq!(global, [LoraScale { adapter: 0, scale: 1.0 }, LoraScale { adapter: 2, scale: 0.5 }]);
        // listed in any order: the same list in id order
        let mine = a.resolve(Some(&[choice(2, 2.0), choice(1, -1.0)])).unwrap();
        assert_eq!(mine, [LoraScale { adapter: 1, scale: -1.0 }, LoraScale { adapter: 2, scale: 2.0 }]);
        assert!(a.resolve(Some(&[])).unwrap().is_empty(), "an empty list: no adapter");
        a.set(&[choice(1, 0.25)]).unwrap();
        assert_eq!(a.resolve(None).unwrap(), [LoraScale { adapter: 1, scale: 0.25 }]);
        assert_eq!(a.describe()[0]["scale"], 0.0);
    }

    #[test]
    fn unknown_repeated_or_infinite_choices_are_refused_naming_them() {
        let a = adapters(2, &[0.0, 0.0]);
        let e = a.resolve(Some(&[choice(2, 1.0)])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("lora"));
        assert!(e.message.contains("adapter 2 is not loaded"), "{}", e.message);
        let e = a.resolve(Some(&[choice(0, 1.0), choice(0, 2.0)])).unwrap_err();
        assert!(e.message.contains("named twice"), "{}", e.message);
        let e = a.set(&[choice(0, 1e40)]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("adapters"));
        assert!(e.message.contains("finite"), "{}", e.message);
        // nothing changed
        assert!(a.resolve(None).unwrap().is_empty());
    }
}
