//! The Responses API's stored responses (`store`, the default): each response with the
//! conversation it ends, for `previous_response_id` and `GET` / `DELETE /v1/responses/{id}`.
//! Kept in memory only, at most `capacity` responses and [`MAX_BYTES`] of JSON together; the
//! least recently used goes first, and a restart forgets them all.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;
use serde_json::Value;

use crate::requests::chat::ChatMessage;

/// Responses kept unless the server is told otherwise (`--responses-store`).
pub const DEFAULT_CAPACITY: usize = 1000;

/// The most JSON (responses and their conversations) kept together: 256 MiB.
pub const MAX_BYTES: usize = 256 << 20;

/// A stored response.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The response object, as it was returned.
    pub response: Value,
    /// The conversation it ends, as chat messages (without its instructions, which a follow-up
    /// does not inherit): earlier turns, its input, its output.
    pub(crate) history: Vec<ChatMessage>,
}

impl Stored {
    fn size(&self) -> usize {
        self.response.to_string().len() + self.history.iter().map(ChatMessage::json_len).sum::<usize>()
    }
}

struct Inner {
    cache: LruCache<String, (Stored, usize)>,
    bytes: usize,
}

pub struct ResponseStore {
    /// `None`: storing is off (`--responses-store 0`).
    inner: Option<Mutex<Inner>>,
    max_bytes: usize,
}

impl ResponseStore {
    pub fn new(capacity: usize) -> ResponseStore {
        ResponseStore::bounded(capacity, MAX_BYTES)
    }

    fn bounded(capacity: usize, max_bytes: usize) -> ResponseStore {
        let inner = NonZeroUsize::new(capacity).map(|c| Mutex::new(Inner { cache: LruCache::new(c), bytes: 0 }));
        ResponseStore { inner, max_bytes }
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Keeps `stored` under `id`, dropping the least recently used responses past the bounds. A
    /// response larger than the byte bound alone is not kept.
    pub fn insert(&self, id: String, stored: Stored) {
        let Some(inner) = &self.inner else { return };
        let size = stored.size();
        if size > self.max_bytes {
            return;
        }
        let mut inner = inner.lock().expect("the response store's lock is never poisoned");
        if let Some((_, (_, old))) = inner.cache.push(id, (stored, size)) {
            inner.bytes -= old;
        }
        inner.bytes += size;
        while inner.bytes > self.max_bytes {
            match inner.cache.pop_lru() {
                Some((_, (_, old))) => inner.bytes -= old,
                None => break,
            }
        }
    }

    /// The response stored under `id` (marking it used).
    pub fn get(&self, id: &str) -> Option<Stored> {
        let inner = self.inner.as_ref()?;
        inner.lock().expect("the response store's lock is never poisoned").cache.get(id).map(|(s, _)| s.clone())
    }

    /// Forgets `id`; false when it was not stored.
    pub fn remove(&self, id: &str) -> bool {
        let Some(inner) = &self.inner else { return false };
        let mut inner = inner.lock().expect("the response store's lock is never poisoned");
        match inner.cache.pop(id) {
            Some((_, size)) => {
                inner.bytes -= size;
                true
            }
            None => false,
        }
    }

    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.lock().expect("the response store's lock is never poisoned").cache.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::requests::chat::Role;

    fn stored(n: usize) -> Stored {
        Stored { response: json!({"n": n}), history: vec![ChatMessage::text(Role::User, "hi".into())] }
    }

    #[test]
    fn the_least_recently_used_response_goes_first() {
        let store = ResponseStore::new(2);
        store.insert("a".into(), stored(1));
        store.insert("b".into(), stored(2));
        assert!(store.get("a").is_some()); // a is now the most recent
        store.insert("c".into(), stored(3));
        assert!(store.get("b").is_none());
        assert_eq!(store.get("a").unwrap().response["n"], 1);
        assert!(store.remove("c"));
        assert!(!store.remove("c"));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_store_of_no_capacity_keeps_nothing() {
        let store = ResponseStore::new(0);
        assert!(!store.enabled());
        store.insert("a".into(), stored(1));
        assert!(store.get("a").is_none());
    }

    #[test]
    fn the_bytes_kept_are_bounded() {
        let store = ResponseStore::bounded(100, 3000);
        let big = |n: usize| Stored { response: json!({"text": "x".repeat(1000), "n": n}), history: Vec::new() };
        for i in 0..5 {
            store.insert(format!("r{i}"), big(i));
        }
        // three of a thousand bytes and more would pass the bound: two remain, the newest
        assert_eq!(store.len(), 2);
        assert!(store.get("r4").is_some() && store.get("r3").is_some());
        assert!(store.inner.as_ref().unwrap().lock().unwrap().bytes <= 3000);
        // one larger than the bound is not kept, and drops nothing
        store.insert("huge".into(), Stored { response: json!("x".repeat(4000)), history: Vec::new() });
        assert!(store.get("huge").is_none());
        assert_eq!(store.len(), 2);
    }
}
