//! Sealing the content-bearing fields of a Redis session row, as
//! `sessionstream.governance.rows.RowCipher.seal` does, byte for byte:
//! `ss-aead1:` + base64(nonce (12 bytes) || AES-256-GCM ciphertext || tag (16 bytes)),
//! the associated data `b"sessionstream-row-v1"` then tenant, session and field name,
//! each as a 4-byte big-endian length + UTF-8 bytes. The Python codec opens these
//! (tests/unit/test_native_rowseal.py checks both ways).
//!
//! The key store stays in Python: the caller hands in, per unit key, its data class
//! (None: a metadata unit, stored clear) and a `key_of(class)` that answers the
//! session's data key, or None to store the class clear (encryption off, or the key
//! shredded); it is asked at most once per class per row.

use foldhash::{HashMap, HashMapExt};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::crypto::{cipher, Aes256Gcm, NONCE_BYTES};

pub const PREFIX: &str = crate::layout::SEALED_PREFIX;
pub const ROW_MAGIC: &[u8] = b"sessionstream-row-v1";
/// A unit the class table does not name (a plugin's) is surface content.
const DEFAULT_CLASS: &str = "surface";

/// The associated data of one row field (`governance.rows.row_ad`).
pub fn row_ad(tenant: &str, session_id: &str, field: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(ROW_MAGIC.len() + 12 + tenant.len() + session_id.len()
                                     + field.len());
    out.extend_from_slice(ROW_MAGIC);
    for text in [tenant, session_id, field] {
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, appended to `out` (whole quads written as bytes).
pub fn b64_into(raw: &[u8], out: &mut String) {
    let mut bytes = std::mem::take(out).into_bytes();
    let start = bytes.len();
    bytes.resize(start + raw.len().div_ceil(3) * 4, b'=');
    let dst = &mut bytes[start..];
    let mut j = 0;
    let mut chunks = raw.chunks_exact(3);
    for c in &mut chunks {
        let n = (u32::from(c[0]) << 16) | (u32::from(c[1]) << 8) | u32::from(c[2]);
        dst[j] = B64[(n >> 18) as usize & 63];
        dst[j + 1] = B64[(n >> 12) as usize & 63];
        dst[j + 2] = B64[(n >> 6) as usize & 63];
        dst[j + 3] = B64[n as usize & 63];
        j += 4;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let b1 = *rest.get(1).unwrap_or(&0);
        let n = (u32::from(rest[0]) << 16) | (u32::from(b1) << 8);
        dst[j] = B64[(n >> 18) as usize & 63];
        dst[j + 1] = B64[(n >> 12) as usize & 63];
        if rest.len() > 1 {
            dst[j + 2] = B64[(n >> 6) as usize & 63];
        }
    }
    // only ASCII was written after a valid string
    *out = String::from_utf8(bytes).expect("base64 is ASCII");
}

/// One sealed field value.
pub fn seal_text(c: &Aes256Gcm, nonce: &[u8], tenant: &str, session_id: &str, field: &str,
                 text: &str) -> Option<String> {
    let ad = row_ad(tenant, session_id, field);
    let mut blob = Vec::with_capacity(NONCE_BYTES + text.len() + crate::aead::TAG_BYTES);
    blob.extend_from_slice(nonce);
    if !c.seal_into(nonce, text.as_bytes(), &ad, &mut blob) {
        return None;
    }
    let mut out = String::with_capacity(PREFIX.len() + blob.len().div_ceil(3) * 4);
    out.push_str(PREFIX);
    b64_into(&blob, &mut out);
    Some(out)
}

/// The unit owning a view, state or chunk field (None: a field never sealed).
pub fn unit_of(field: &str) -> Option<&str> {
    if let Some(rest) = field.strip_prefix(crate::layout::PART) {
        return Some(rest.split(':').next().unwrap_or(rest));
    }
    field.strip_prefix(crate::layout::VIEW).or_else(|| field.strip_prefix(crate::layout::STATE))
}

/// Seal, in place, every view/state/chunk field of `fields` whose unit's class has a
/// key: `classes` unit key -> class value (None: clear); `key_of(class)` -> the data key
/// (bytes) or None (clear). Returns how many fields were sealed.
#[pyfunction]
pub fn seal_row(py: Python<'_>, tenant: &str, session_id: &str, fields: &Bound<'_, PyDict>,
                classes: HashMap<String, Option<String>>, key_of: &Bound<'_, PyAny>)
                -> PyResult<usize> {
    Ok(seal_fields(py, tenant, session_id, fields, &classes, key_of, false)?.len())
}

/// `seal_row`, and per field sealed (its name, the SHA-1 of the value now stored as
/// lowercase hex, the BLAKE2b-128 digest of its clear text): what replay keeps to
/// compare the row without opening it (`streams.native_fold.sealed_ref` and
/// `field_digest` give the same; ADR 0015). Hashed with the sealing, without the GIL.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn seal_row_digested<'py>(py: Python<'py>, tenant: &str, session_id: &str,
                              fields: &Bound<'py, PyDict>,
                              classes: HashMap<String, Option<String>>,
                              key_of: &Bound<'py, PyAny>)
                              -> PyResult<Vec<(String, String, Bound<'py, PyBytes>)>> {
    let sealed = seal_fields(py, tenant, session_id, fields, &classes, key_of, true)?;
    Ok(sealed.into_iter().map(|(name, (sha, clear))| (name, sha, PyBytes::new(py, &clear)))
        .collect())
}

type Digested = (String, [u8; 16]);

#[allow(clippy::type_complexity)]
fn seal_fields(py: Python<'_>, tenant: &str, session_id: &str, fields: &Bound<'_, PyDict>,
               classes: &HashMap<String, Option<String>>, key_of: &Bound<'_, PyAny>,
               digests: bool) -> PyResult<Vec<(String, Digested)>> {
    let mut todo: Vec<(String, String, usize)> = Vec::new();  // (name, text, key slot)
    let mut slots: HashMap<String, usize> = HashMap::new();
    let mut ciphers: Vec<Option<Aes256Gcm>> = Vec::new();
    for (k, v) in fields.iter() {
        let name: String = k.extract()?;
        let Some(unit) = unit_of(&name) else { continue };
        let class = match classes.get(unit) {
            Some(None) => continue,
            Some(Some(c)) => c.as_str(),
            None => DEFAULT_CLASS,
        };
        let slot = match slots.get(class) {
            Some(&s) => s,
            None => {
                let got = key_of.call1((class,))?;
                let c = if got.is_none() {
                    None
                } else {
                    let key = got.downcast::<PyBytes>()?.as_bytes();
                    Some(cipher(key).ok_or_else(|| PyValueError::new_err(format!(
                        "the data key of class {class:?} is {} bytes, need 32", key.len())))?)
                };
                ciphers.push(c);
                slots.insert(class.to_string(), ciphers.len() - 1);
                ciphers.len() - 1
            }
        };
        if ciphers[slot].is_some() {
            todo.push((name, v.extract()?, slot));
        }
    }
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let mut nonces = vec![0u8; NONCE_BYTES * todo.len()];
    getrandom::getrandom(&mut nonces)
        .map_err(|e| PyRuntimeError::new_err(format!("no random nonce: {e}")))?;
    let sealed: Vec<(String, String, Digested)> = py.allow_threads(|| {
        todo.iter().enumerate().map(|(i, (name, text, slot))| {
            let c = ciphers[*slot].as_ref().expect("a key");
            let nonce = &nonces[i * NONCE_BYTES..(i + 1) * NONCE_BYTES];
            let value = seal_text(c, nonce, tenant, session_id, name, text)
                .expect("AES-GCM seals any length a row holds");
            let digest = if digests {
                (sha1_hex(value.as_bytes()), blake2b_128(text.as_bytes()))
            } else {
                (String::new(), [0u8; 16])
            };
            (name.clone(), value, digest)
        }).collect()
    });
    let mut out = Vec::with_capacity(sealed.len());
    for (name, value, digest) in sealed {
        fields.set_item(&name, value)?;
        out.push((name, digest));
    }
    Ok(out)
}

/// The SHA-1 of `raw`, lowercase hex (Redis's `redis.sha1hex`, Python's hexdigest).
pub fn sha1_hex(raw: &[u8]) -> String {
    use sha1::{Digest, Sha1};
    let sum = Sha1::digest(raw);
    let mut out = String::with_capacity(40);
    for b in sum {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    out
}

/// BLAKE2b with a 16-byte digest, unkeyed (Python's `hashlib.blake2b(digest_size=16)`).
pub fn blake2b_128(raw: &[u8]) -> [u8; 16] {
    use blake2::digest::consts::U16;
    use blake2::{Blake2b, Digest};
    let mut out = [0u8; 16];
    out.copy_from_slice(&Blake2b::<U16>::digest(raw));
    out
}

/// Standard base64 with padding, strictly (the alphabet, whole quads); None otherwise.
pub fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let raw = text.as_bytes();
    if raw.len() % 4 != 0 {
        return None;
    }
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(raw.len() / 4 * 3);
    let quads = raw.len() / 4;
    for (q, chunk) in raw.chunks(4).enumerate() {
        let pad = if q + 1 == quads {
            chunk.iter().rev().take_while(|&&c| c == b'=').count()
        } else {
            0
        };
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n = (n << 6) | if i >= 4 - pad { 0 } else { val(c)? };
        }
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Some(out)
}

/// The clear texts of a row's fields, as `governance.rows.RowCipher.open` gives them:
/// every value of `fields` not sealed as it is, every sealed one opened with the data
/// key `key_of(class)` answers (bytes, or None: no key) for its unit's class in
/// `classes`. None when any sealed field does not open here (no key, a unit without a
/// class, tampered or moved, not UTF-8): the caller's Python opener decides then.
#[pyfunction]
pub fn open_row(py: Python<'_>, tenant: &str, session_id: &str,
                fields: HashMap<String, String>, classes: HashMap<String, Option<String>>,
                key_of: &Bound<'_, PyAny>) -> PyResult<Option<HashMap<String, String>>> {
    let mut ciphers: HashMap<String, Aes256Gcm> = HashMap::new();
    for (name, value) in &fields {
        if !value.starts_with(PREFIX) {
            continue;
        }
        let Some(Some(class)) = unit_of(name).and_then(|u| classes.get(u)) else {
            return Ok(None);
        };
        if !ciphers.contains_key(class) {
            let got = key_of.call1((class.as_str(),))?;
            if got.is_none() {
                return Ok(None);
            }
            let Some(c) = cipher(got.downcast::<PyBytes>()?.as_bytes()) else {
                return Ok(None);
            };
            ciphers.insert(class.clone(), c);
        }
    }
    Ok(py.allow_threads(|| {
        let mut out = HashMap::with_capacity(fields.len());
        for (name, value) in fields {
            let Some(b64) = value.strip_prefix(PREFIX) else {
                out.insert(name, value);
                continue;
            };
            let class = unit_of(&name).and_then(|u| classes.get(u)).cloned().flatten()?;
            let blob = b64_decode(b64)?;
            if blob.len() < NONCE_BYTES {
                return None;
            }
            let ad = row_ad(tenant, session_id, &name);
            let clear = ciphers.get(&class)?
                .open(&blob[..NONCE_BYTES], &blob[NONCE_BYTES..], &ad)?;
            out.insert(name, String::from_utf8(clear).ok()?);
        }
        Some(out)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_what_it_encodes_and_refuses_other_text() {
        for n in 0..40usize {
            let raw: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
            let mut text = String::new();
            b64_into(&raw, &mut text);
            assert_eq!(b64_decode(&text), Some(raw));
        }
        for bad in ["abc", "ab!=", "a===", "ab=c", "====", "ab==abcd"] {
            assert_eq!(b64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        for (raw, want) in [(&b""[..], ""), (b"f", "Zg=="), (b"fo", "Zm8="), (b"foo", "Zm9v"),
                            (b"foob", "Zm9vYg=="), (b"\xff\xfe\xfd", "//79")] {
            let mut out = String::new();
            b64_into(raw, &mut out);
            assert_eq!(out, want);
        }
    }

    #[test]
    fn unit_of_follows_the_codec_rule() {
        assert_eq!(unit_of("view:surface"), Some("surface"));
        assert_eq!(unit_of("state:turns"), Some("turns"));
        assert_eq!(unit_of("part:surface:messages:3"), Some("surface"));
        assert_eq!(unit_of("parts:surface"), None);
        assert_eq!(unit_of("sv:surface"), None);
        assert_eq!(unit_of("meta"), None);
    }
}
