//! Opening sealed content (AES-256-GCM), as `sessionstream.core.privacy.open_data` does.
//!
//! The format is docs/adr/0011 and docs/operations.md ("AEAD format"), byte for byte:
//! each sealed part is AES-256-GCM with a 12-byte nonce, the 16-byte tag appended to
//! the ciphertext, and the associated data `b"sessionstream-aead-v1"` then, each as a
//! 4-byte big-endian length + UTF-8 bytes: tenant, key_session, origin_event_id,
//! event type, data class, the paths joined by `\n`; then seq as an 8-byte
//! big-endian signed integer. The plaintext is the canonical JSON array of the
//! values, in path order; each value goes back at its RFC 6901 pointer in `data`.
//!
//! The key store stays in Python (`sessionstream.governance`): the caller hands in a
//! lookup that answers a (key session, class) with the unwrapped data key, or with
//! "shredded"/"missing"; it is asked at most once per key per batch (the store
//! caches keys for its own short time, so a deletion reaches this reader as soon as
//! it reaches the Python opener). A missing or shredded key puts the placeholder of
//! the Python reference (`placeholder_at`, asked once per type/path/text and
//! cached) at each of the part's paths. Anything else that is not the plain success
//! path — a part moved from another event, a tag that does not verify, a plaintext
//! that is not lossless JSON or does not match its paths, a path this code does not
//! resolve exactly as Python would — is `Refuse`: the caller hands the session to
//! the Python opener, which gives the reference verdict (the quarantine and its
//! reason), so the two paths cannot drift on the failure cases.

use std::collections::HashMap;
use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use serde_json::Value;

use crate::json;

pub const AD_MAGIC: &[u8] = b"sessionstream-aead-v1";
pub const NONCE_BYTES: usize = 12;
pub const TAG_BYTES: usize = 16;
pub const KEY_BYTES: usize = 32;
pub const DELETED_TEXT: &str = "[content deleted]";
pub const UNAVAILABLE_TEXT: &str = "[content unavailable]";

/// One item of the envelope's `sealed` (schema v2), owned.
#[derive(Clone, Debug)]
pub struct Part {
    pub data_class: String,
    pub key_session: String,
    pub origin_event_id: String,
    pub paths: Vec<String>,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

/// What the key store says of one (key session, class).
#[derive(Clone)]
pub enum KeyLookup {
    Active(Arc<Aes256Gcm>),
    Shredded,
    Missing,
}

/// Not opened here: the Python opener decides (and gives the reference verdict).
#[derive(Debug)]
pub struct Refuse;

/// The associated data of one sealed part (`sessionstream.core.privacy.associated_data`).
pub fn associated_data(tenant: &str, key_session: &str, seq: i64, origin_event_id: &str,
                       event_type: &str, data_class: &str, paths: &[String]) -> Vec<u8> {
    let joined = paths.join("\n");
    let mut out = Vec::with_capacity(AD_MAGIC.len() + 6 * 4 + 8 + tenant.len()
                                     + key_session.len() + origin_event_id.len()
                                     + event_type.len() + data_class.len() + joined.len());
    out.extend_from_slice(AD_MAGIC);
    for text in [tenant, key_session, origin_event_id, event_type, data_class, joined.as_str()] {
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(&seq.to_be_bytes());
    out
}

/// A cipher for a 32-byte data key (None: not a data key; Python refuses it too).
pub fn cipher(key: &[u8]) -> Option<Aes256Gcm> {
    if key.len() != KEY_BYTES {
        return None;
    }
    Some(Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)))
}

/// AES-256-GCM decryption (None: a bad nonce/length or a tag that does not verify).
pub fn decrypt(cipher: &Aes256Gcm, nonce: &[u8], ciphertext: &[u8], ad: &[u8]) -> Option<Vec<u8>> {
    if nonce.len() != NONCE_BYTES || ciphertext.len() < TAG_BYTES {
        return None;
    }
    cipher.decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: ad }).ok()
}

/// The tokens of an RFC 6901 pointer, unescaped as `privacy.pointer_tokens` does.
fn tokens(path: &str) -> Option<Vec<String>> {
    let rest = path.strip_prefix('/')?;
    Some(rest.split('/').map(|t| if t.contains('~') {
        t.replace("~1", "/").replace("~0", "~")
    } else {
        t.to_string()
    }).collect())
}

/// `value` set at `where` (privacy._with): an object gets the key set (the last token
/// may be new, the ones before must exist); an array index must be plain digits and
/// in range. Anything else: Refuse (Python raises SealedContentError there, or accepts
/// a form this code does not copy, e.g. a negative index).
fn set_at(container: &mut Value, tokens: &[String], value: Value) -> Result<(), Refuse> {
    let (head, rest) = tokens.split_first().ok_or(Refuse)?;
    match container {
        Value::Array(items) => {
            if head.is_empty() || !head.bytes().all(|b| b.is_ascii_digit()) || head.len() > 18 {
                return Err(Refuse);
            }
            let i: usize = head.parse().map_err(|_| Refuse)?;
            let slot = items.get_mut(i).ok_or(Refuse)?;
            if rest.is_empty() {
                *slot = value;
                Ok(())
            } else {
                set_at(slot, rest, value)
            }
        }
        Value::Object(map) => {
            if rest.is_empty() {
                map.insert(head.clone(), value);
                Ok(())
            } else {
                set_at(map.get_mut(head.as_str()).ok_or(Refuse)?, rest, value)
            }
        }
        _ => Err(Refuse),
    }
}

/// What the fold needs to open one session's events.
pub struct Opener<'a> {
    pub tenant: &'a str,
    pub session_id: &'a str,
    /// The session's seed length, learnt from its `session/start` (None: not seen).
    pub seed_length: Option<i64>,
}

/// Where a part's key and placeholders come from (the batch's caches over Python).
pub trait Keys {
    fn lookup(&mut self, key_session: &str, data_class: &str) -> Result<KeyLookup, Refuse>;
    fn placeholder(&mut self, event_type: &str, path: &str, text: &str) -> Result<Value, Refuse>;
}

/// The opened data.
pub struct Opened {
    pub data: Value,
}

impl Opener<'_> {
    /// `data` with every sealed part put back (or its reason's placeholders), exactly as
    /// `privacy.open_data`; `Refuse` for everything Python would refuse or raise on.
    pub fn open(&self, keys: &mut dyn Keys, seq: i64, event_id: &str, event_type: &str,
                mut data: Value, parts: &[Part]) -> Result<Opened, Refuse> {
        let mut replacements: Vec<(&str, Value)> = Vec::new();
        for part in parts {
            let own = part.key_session == self.session_id && part.origin_event_id == event_id;
            let inherited = part.key_session != self.session_id
                && self.seed_length.is_none_or(|n| seq < n);
            if !own && !inherited {
                return Err(Refuse); // MovedCiphertext: Python quarantines with its reason
            }
            match keys.lookup(&part.key_session, &part.data_class)? {
                KeyLookup::Active(c) => {
                    let ad = associated_data(self.tenant, &part.key_session, seq,
                                             &part.origin_event_id, event_type,
                                             &part.data_class, &part.paths);
                    let plain = decrypt(&c, &part.nonce, &part.ciphertext, &ad).ok_or(Refuse)?;
                    let text = std::str::from_utf8(&plain).map_err(|_| Refuse)?;
                    let Some(Value::Array(values)) = json::parse_checked(text) else {
                        return Err(Refuse);
                    };
                    if values.len() != part.paths.len() {
                        return Err(Refuse);
                    }
                    replacements.extend(part.paths.iter().map(String::as_str).zip(values));
                }
                state => {
                    let text = if matches!(state, KeyLookup::Shredded) { DELETED_TEXT }
                               else { UNAVAILABLE_TEXT };
                    for p in &part.paths {
                        replacements.push((p.as_str(), keys.placeholder(event_type, p, text)?));
                    }
                }
            }
        }
        for (path, value) in replacements {
            let toks = tokens(path).ok_or(Refuse)?;
            set_at(&mut data, &toks, value)?;
        }
        Ok(Opened { data })
    }
}

/// The index of a data class in a per-session key slot.
pub fn class_index(data_class: &str) -> usize {
    match data_class {
        "raw" => 0,
        "surface" => 1,
        _ => 2,
    }
}

/// A per-batch cache of key lookups and placeholders over two Python callables.
#[derive(Default)]
pub struct Cache {
    /// key session -> the lookup of each class (raw, surface, business)
    pub keys: HashMap<String, [Option<KeyLookup>; 3]>,
    pub placeholders: HashMap<(String, String, &'static str), Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes_gcm::aead::Aead;

    struct Fixed(Option<Aes256Gcm>);

    impl Keys for Fixed {
        fn lookup(&mut self, _: &str, _: &str) -> Result<KeyLookup, Refuse> {
            Ok(match &self.0 {
                Some(c) => KeyLookup::Active(Arc::new(c.clone())),
                None => KeyLookup::Shredded,
            })
        }
        fn placeholder(&mut self, _: &str, _: &str, text: &str) -> Result<Value, Refuse> {
            Ok(Value::String(text.to_string()))
        }
    }

    fn seal(c: &Aes256Gcm, plain: &str, ad: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let nonce = vec![7u8; 12];
        let ct = c.encrypt(Nonce::from_slice(&nonce), Payload { msg: plain.as_bytes(), aad: ad })
            .unwrap();
        (nonce, ct)
    }

    #[test]
    fn associated_data_layout() {
        let ad = associated_data("t", "s", 258, "e", "user/message", "surface",
                                 &["/a".to_string(), "/b".to_string()]);
        let mut want = b"sessionstream-aead-v1".to_vec();
        for t in ["t", "s", "e", "user/message", "surface", "/a\n/b"] {
            want.extend_from_slice(&(t.len() as u32).to_be_bytes());
            want.extend_from_slice(t.as_bytes());
        }
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(ad, want);
    }

    #[test]
    fn opens_and_refuses_tampering_and_moves() {
        let c = cipher(&[1u8; 32]).unwrap();
        let paths = vec!["/content".to_string()];
        let ad = associated_data("t", "s", 3, "e3", "user/message", "surface", &paths);
        let (nonce, ct) = seal(&c, "[\"hello\"]", &ad);
        let part = Part { data_class: "surface".into(), key_session: "s".into(),
                          origin_event_id: "e3".into(), paths, nonce, ciphertext: ct };
        let o = Opener { tenant: "t", session_id: "s", seed_length: Some(0) };
        let data: Value = serde_json::from_str("{\"content\":\"[encrypted content]\"}").unwrap();
        let got = o.open(&mut Fixed(Some(c.clone())), 3, "e3", "user/message", data.clone(),
                         std::slice::from_ref(&part)).unwrap();
        assert_eq!(json::dumps(&got.data), "{\"content\":\"hello\"}");
        // another seq: the associated data differs, the tag does not verify
        assert!(o.open(&mut Fixed(Some(c.clone())), 4, "e3", "user/message", data.clone(),
                       std::slice::from_ref(&part)).is_err());
        // a flipped ciphertext byte
        let mut bad = part.clone();
        bad.ciphertext[0] ^= 1;
        assert!(o.open(&mut Fixed(Some(c.clone())), 3, "e3", "user/message", data.clone(),
                       std::slice::from_ref(&bad)).is_err());
        // moved from another event of the session
        assert!(o.open(&mut Fixed(Some(c)), 3, "e4", "user/message", data.clone(),
                       std::slice::from_ref(&part)).is_err());
        // shredded: the placeholder
        let got = o.open(&mut Fixed(None), 3, "e3", "user/message", data,
                         std::slice::from_ref(&part)).unwrap();
        assert_eq!(json::dumps(&got.data), "{\"content\":\"[content deleted]\"}");
    }

    #[test]
    fn pointers_resolve_as_in_python_or_refuse() {
        let mut v: Value = serde_json::from_str("{\"a/b\":[1,{\"x\":2}]}").unwrap();
        set_at(&mut v, &tokens("/a~1b/1/x").unwrap(), Value::Bool(true)).unwrap();
        assert_eq!(json::dumps(&v), "{\"a/b\":[1,{\"x\":true}]}");
        assert!(set_at(&mut v, &tokens("/a~1b/-1").unwrap(), Value::Null).is_err());
        assert!(set_at(&mut v, &tokens("/a~1b/5").unwrap(), Value::Null).is_err());
        assert!(set_at(&mut v, &tokens("/nope/x").unwrap(), Value::Null).is_err());
        assert!(tokens("nope").is_none());
    }
}
