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

use foldhash::HashMap;
use std::sync::Arc;

use std::borrow::Cow;

use serde_json::Value;

pub use crate::aead::{Aes256Gcm, KEY_BYTES, NONCE_BYTES};

use crate::json;

pub const AD_MAGIC: &[u8] = b"sessionstream-aead-v1";
pub const DELETED_TEXT: &str = "[content deleted]";
pub const UNAVAILABLE_TEXT: &str = "[content unavailable]";

/// One item of the envelope's `sealed` (schema v2), borrowed from the record bytes.
pub use crate::avro::SealedRef as Part;

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
pub fn associated_data<S: AsRef<str>>(tenant: &str, key_session: &str, seq: i64,
                                      origin_event_id: &str, event_type: &str,
                                      data_class: &str, paths: &[S]) -> Vec<u8> {
    let mut out = Vec::new();
    associated_data_into(&mut out, tenant, key_session, seq, origin_event_id, event_type,
                         data_class, paths);
    out
}

/// `associated_data` written into `out` (cleared first: a buffer reused per part).
#[allow(clippy::too_many_arguments)]
pub fn associated_data_into<S: AsRef<str>>(out: &mut Vec<u8>, tenant: &str, key_session: &str,
                                           seq: i64, origin_event_id: &str, event_type: &str,
                                           data_class: &str, paths: &[S]) {
    let joined: usize = paths.iter().map(|p| p.as_ref().len()).sum::<usize>()
        + paths.len().saturating_sub(1);
    out.clear();
    out.reserve(AD_MAGIC.len() + 6 * 4 + 8 + tenant.len() + key_session.len()
                + origin_event_id.len() + event_type.len() + data_class.len() + joined);
    out.extend_from_slice(AD_MAGIC);
    for text in [tenant, key_session, origin_event_id, event_type, data_class] {
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(&(joined as u32).to_be_bytes());
    for (i, p) in paths.iter().enumerate() {
        if i > 0 {
            out.push(b'\n');
        }
        out.extend_from_slice(p.as_ref().as_bytes());
    }
    out.extend_from_slice(&seq.to_be_bytes());
}

/// A cipher for a 32-byte data key (None: not a data key; Python refuses it too).
pub fn cipher(key: &[u8]) -> Option<Aes256Gcm> {
    Aes256Gcm::new(key)
}

/// AES-256-GCM decryption (None: a bad nonce/length or a tag that does not verify).
#[allow(dead_code)] // the fold decrypts into a reused buffer (decrypt_into)
pub fn decrypt(cipher: &Aes256Gcm, nonce: &[u8], ciphertext: &[u8], ad: &[u8]) -> Option<Vec<u8>> {
    cipher.open(nonce, ciphertext, ad)
}

/// AES-256-GCM decryption into `out` (cleared first, reused per part: no allocation per
/// part once it is large enough); false on a bad nonce/length or a tag that does not verify
/// (`out` then holds no plaintext).
pub fn decrypt_into(cipher: &Aes256Gcm, nonce: &[u8], ciphertext: &[u8], ad: &[u8],
                    out: &mut Vec<u8>) -> bool {
    cipher.open_into(nonce, ciphertext, ad, out)
}

/// One RFC 6901 token, unescaped as `privacy.pointer_tokens` does (borrowed unless it
/// holds an escape).
fn unescape(t: &str) -> Cow<'_, str> {
    if t.contains('~') {
        Cow::Owned(t.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(t)
    }
}

/// `value` set at the RFC 6901 pointer `path`: `set_at` over its tokens, without
/// allocating them (Refuse when the pointer does not start with `/`).
fn set_at_path(container: &mut Value, path: &str, value: Value) -> Result<(), Refuse> {
    let mut rest = path.strip_prefix('/').ok_or(Refuse)?;
    let mut here = container;
    loop {
        let (tok, more) = match rest.split_once('/') {
            Some((t, m)) => (t, Some(m)),
            None => (rest, None),
        };
        let head = unescape(tok);
        let slot = match here {
            Value::Array(items) => {
                if head.is_empty() || !head.bytes().all(|b| b.is_ascii_digit()) || head.len() > 18 {
                    return Err(Refuse);
                }
                let i: usize = head.parse().map_err(|_| Refuse)?;
                items.get_mut(i).ok_or(Refuse)?
            }
            Value::Object(map) => {
                if more.is_none() {
                    map.insert(head.into_owned(), value);
                    return Ok(());
                }
                map.get_mut(head.as_ref()).ok_or(Refuse)?
            }
            _ => return Err(Refuse),
        };
        match more {
            None => {
                *slot = value;
                return Ok(());
            }
            Some(m) => {
                rest = m;
                here = slot;
            }
        }
    }
}

/// The tokens of an RFC 6901 pointer, unescaped as `privacy.pointer_tokens` does.
#[cfg(test)]
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

/// A part's plaintext framing (core/privacy.py): JSON text as is, or FRAMED, DEFLATE and
/// a raw DEFLATE stream; parts shorter than COMPRESS_FROM bytes of JSON are never framed.
pub const FRAMED: u8 = 0x00;
const DEFLATE: u8 = 0x01;
pub const COMPRESS_FROM: usize = 64;
/// What a part may inflate to (privacy.PLAINTEXT_LIMIT).
const PLAINTEXT_LIMIT: usize = 64 * 1024 * 1024;

/// The JSON text of a framed plaintext; None for an unknown framing or a stream that does
/// not inflate whole within the limit (Python raises SealedContentError for both).
pub fn inflate(plain: &[u8]) -> Option<Vec<u8>> {
    if plain.len() < 2 || plain[0] != FRAMED || plain[1] != DEFLATE {
        return None;
    }
    miniz_oxide::inflate::decompress_to_vec_with_limit(&plain[2..], PLAINTEXT_LIMIT).ok()
}

/// The opened data.
pub struct Opened {
    pub data: Value,
}

/// Buffers reused from part to part (the associated data, the plaintext).
#[derive(Default)]
pub struct Scratch {
    ad: Vec<u8>,
    plain: Vec<u8>,
}

impl Opener<'_> {
    /// `data` with every sealed part put back (or its reason's placeholders), exactly as
    /// `privacy.open_data`; `Refuse` for everything Python would refuse or raise on. Each
    /// part's plaintext is decrypted into `scratch` and parsed once, straight from there;
    /// its values are set in `data` in part and path order, as Python merges them.
    pub fn open(&self, keys: &mut dyn Keys, seq: i64, event_id: &str, event_type: &str,
                mut data: Value, parts: &[Part<'_>], scratch: &mut Scratch)
                -> Result<Opened, Refuse> {
        for part in parts {
            let own = part.key_session == self.session_id && part.origin_event_id == event_id;
            let inherited = part.key_session != self.session_id
                && self.seed_length.is_none_or(|n| seq < n);
            if !own && !inherited {
                return Err(Refuse); // MovedCiphertext: Python quarantines with its reason
            }
        }
        for part in parts {
            match keys.lookup(part.key_session, part.data_class)? {
                KeyLookup::Active(c) => {
                    associated_data_into(&mut scratch.ad, self.tenant, part.key_session, seq,
                                         part.origin_event_id, event_type, part.data_class,
                                         &part.paths);
                    if !decrypt_into(&c, part.nonce, part.ciphertext, &scratch.ad,
                                     &mut scratch.plain) {
                        return Err(Refuse);
                    }
                    let inflated;
                    let plain: &[u8] = if scratch.plain.first() == Some(&FRAMED) {
                        inflated = inflate(&scratch.plain).ok_or(Refuse)?;
                        &inflated
                    } else {
                        &scratch.plain
                    };
                    let text = std::str::from_utf8(plain).map_err(|_| Refuse)?;
                    let Some(Value::Array(values)) = json::parse_checked(text) else {
                        return Err(Refuse);
                    };
                    if values.len() != part.paths.len() {
                        return Err(Refuse);
                    }
                    for (path, value) in part.paths.iter().zip(values) {
                        set_at_path(&mut data, path, value)?;
                    }
                }
                state => {
                    let text = if matches!(state, KeyLookup::Shredded) { DELETED_TEXT }
                               else { UNAVAILABLE_TEXT };
                    for p in &part.paths {
                        let v = keys.placeholder(event_type, p, text)?;
                        set_at_path(&mut data, p, v)?;
                    }
                }
            }
        }
        Ok(Opened { data })
    }
}

/// The index of a data class in a per-session key slot.
pub fn class_index(data_class: &str) -> usize {
    match data_class {
        "raw" => 0,
        "surface" => 1,
        "business" => 2,
        _ => 3, // reasoning (avro.rs DATA_CLASSES refuses any other class)
    }
}

/// One key store answer as the fold keeps it.
pub struct Held {
    pub found: KeyLookup,
    /// Until when (the store's monotonic clock) it may be reused in a later batch.
    pub until: f64,
    /// The batch that asked for it (reused within that batch whatever `until` says).
    pub batch: u64,
}

/// A cache of key lookups and placeholders over the Python callables. An answer is
/// reused within the batch that asked for it; in a later one only while the store's
/// epoch is the one seen when it was asked and the store's clock is before its `until`
/// (`begin` is called at each batch's first lookup with the store's (epoch, now)).
/// Without an epoch (`begin` never called) nothing is reused across batches.
#[derive(Default)]
pub struct Cache {
    /// key session -> the lookup of each class (raw, surface, business, reasoning)
    pub keys: HashMap<String, [Option<Held>; 4]>,
    pub placeholders: HashMap<(String, String, &'static str), Value>,
    /// The batch being folded (`next_batch`), and whether `begin` was called in it.
    pub batch: u64,
    pub begun: bool,
    /// The store's clock at this batch's `begin` (-inf: none, reuse nothing).
    pub now: f64,
    /// The store's epoch the held keys were asked under.
    pub epoch: Option<i64>,
}

impl Cache {
    /// A new batch: nothing is reused from earlier ones until `begin` says so.
    pub fn next_batch(&mut self) {
        self.batch += 1;
        self.begun = false;
        self.now = f64::INFINITY; // no `until` reaches it: nothing older is reused
    }

    /// The store's (epoch, now) at this batch's first lookup: a changed epoch drops
    /// every held key (a shred, a reset feed, a rewrap since they were asked).
    pub fn begin(&mut self, epoch: i64, now: f64) {
        if self.epoch != Some(epoch) {
            self.keys.clear();
            self.epoch = Some(epoch);
        }
        self.now = now;
        self.begun = true;
    }

    /// The held answer for (key session, class index), if it may be used now.
    pub fn get(&self, key_session: &str, class: usize) -> Option<&KeyLookup> {
        let held = self.keys.get(key_session)?[class].as_ref()?;
        (held.batch == self.batch || held.until > self.now).then_some(&held.found)
    }

    pub fn put(&mut self, key_session: &str, class: usize, found: KeyLookup, until: f64) {
        let batch = self.batch;
        let slot = match self.keys.get_mut(key_session) {
            Some(s) => s,
            None => self.keys.entry(key_session.to_string()).or_default(),
        };
        slot[class] = Some(Held { found, until, batch });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let ct = c.seal(&nonce, plain.as_bytes(), ad).unwrap();
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
        let paths = vec!["/content"];
        let ad = associated_data("t", "s", 3, "e3", "user/message", "surface", &paths);
        let (nonce, ct) = seal(&c, "[\"hello\"]", &ad);
        let part = Part { data_class: "surface", key_session: "s", origin_event_id: "e3",
                          paths, nonce: &nonce, ciphertext: &ct };
        let o = Opener { tenant: "t", session_id: "s", seed_length: Some(0) };
        let data: Value = serde_json::from_str("{\"content\":\"[encrypted content]\"}").unwrap();
        let mut sc = Scratch::default();
        let got = o.open(&mut Fixed(Some(c.clone())), 3, "e3", "user/message", data.clone(),
                         std::slice::from_ref(&part), &mut sc).unwrap();
        assert_eq!(json::dumps(&got.data), "{\"content\":\"hello\"}");
        // another seq: the associated data differs, the tag does not verify
        assert!(o.open(&mut Fixed(Some(c.clone())), 4, "e3", "user/message", data.clone(),
                       std::slice::from_ref(&part), &mut sc).is_err());
        assert!(sc.plain.is_empty(), "no plaintext is left behind by a failed tag");
        // a flipped ciphertext byte
        let mut flipped = ct.clone();
        flipped[0] ^= 1;
        let bad = Part { ciphertext: &flipped, paths: part.paths.clone(), ..part };
        assert!(o.open(&mut Fixed(Some(c.clone())), 3, "e3", "user/message", data.clone(),
                       std::slice::from_ref(&bad), &mut sc).is_err());
        // moved from another event of the session
        assert!(o.open(&mut Fixed(Some(c)), 3, "e4", "user/message", data.clone(),
                       std::slice::from_ref(&part), &mut sc).is_err());
        // shredded: the placeholder
        let got = o.open(&mut Fixed(None), 3, "e3", "user/message", data,
                         std::slice::from_ref(&part), &mut sc).unwrap();
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

    #[test]
    fn set_at_path_matches_set_at_on_every_pointer() {
        let doc = "{\"a/b\":[1,{\"x\":2,\"~k\":[0,1]}],\"c\":{\"d\":{}},\"\":3}";
        for path in ["/a~1b/1/x", "/a~1b/1/~0k/1", "/a~1b/0", "/c/d/new", "/c/new", "/",
                     "/a~1b/-1", "/a~1b/5", "/a~1b/01", "/nope/x", "/c/d/e/f", "/a~1b/1/x/y",
                     "/a~1b/", "nope", ""] {
            let mut want: Value = serde_json::from_str(doc).unwrap();
            let mut got = want.clone();
            let w = tokens(path).ok_or(Refuse)
                .and_then(|t| set_at(&mut want, &t, Value::Bool(true)));
            let g = set_at_path(&mut got, path, Value::Bool(true));
            assert_eq!(w.is_ok(), g.is_ok(), "{path}");
            if w.is_ok() {
                assert_eq!(json::dumps(&want), json::dumps(&got), "{path}");
            }
        }
    }

    #[test]
    fn associated_data_into_reuses_its_buffer_and_equals_the_plain_one() {
        let mut buf = b"left over".to_vec();
        for paths in [vec![], vec!["/a"], vec!["/a", "/b/0", "/c"]] {
            associated_data_into(&mut buf, "t", "s", -3, "e", "x/y", "raw", &paths);
            let owned: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
            assert_eq!(buf, associated_data("t", "s", -3, "e", "x/y", "raw", &owned));
        }
    }

    #[test]
    fn held_keys_are_reused_only_in_their_batch_or_under_the_same_epoch_in_time() {
        let mut c = Cache::default();
        c.next_batch();
        c.put("s", 1, KeyLookup::Missing, 0.0);
        assert!(c.get("s", 1).is_some(), "asked in this batch: reused in it");
        assert!(c.get("s", 0).is_none());
        c.next_batch();
        assert!(c.get("s", 1).is_none(), "no begin: nothing from an earlier batch");
        c.begin(7, 1.0);
        assert!(c.get("s", 1).is_none(), "a missing key (until = asked) is asked again");
        c.put("s", 1, KeyLookup::Shredded, 61.0);
        c.next_batch();
        c.begin(7, 60.0);
        assert!(c.get("s", 1).is_some(), "same epoch, before its until");
        c.next_batch();
        c.begin(7, 61.0);
        assert!(c.get("s", 1).is_none(), "its until reached");
        c.put("s", 1, KeyLookup::Shredded, 100.0);
        c.next_batch();
        c.begin(8, 62.0);
        assert!(c.get("s", 1).is_none(), "a new epoch drops every held key");
        assert!(c.keys.is_empty());
    }
}
