//! The append path's per-event work, in one or two calls (docs/adr/0016).
//!
//! `Appender.freeze(data)` does what `sessionstream.core.jsonvalue.check_and_freeze`
//! followed by `canonical_dumps` does, in one walk of the Python value: it checks
//! the value is lossless JSON, copies it into the read-only containers
//! (`FrozenMap` / `FrozenList`, handed in) and renders its canonical text. It
//! returns `None` for anything it does not accept; the caller then takes the Python
//! path, which names the offending path (so a rejection reads exactly as before).
//!
//! `Appender.encode(event, text)` writes the Avro single-object record of a stamped
//! `Event` (schema v2's field layout, the writer schema's header handed in), the
//! bytes `sessionstream.core.codec.AvroCodec.encode` writes. `Appender.seal(...)`
//! does what `ContentCipher.seal_event` + encode do: takes the content fields out
//! of `data` by the type's sealing plan (`sessionstream.core.privacy.split`, whose
//! plan the caller registers with `set_plan`), puts the placeholders in, encrypts
//! each class's values (AES-256-GCM, crate::crypto's associated data, the nonces
//! handed in), and writes the envelope with its `sealed` parts. Whatever it cannot
//! do exactly as Python does (a field of an unexpected type, nested sealed paths, a
//! key that is not 32 bytes) is `None`: the caller uses the Python reference.

use foldhash::{HashMap, HashMapExt};

use crate::aead::Aes256Gcm;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// `sessionstream.core.privacy.compress_plaintext`, looked up once.
static COMPRESS: GILOnceCell<Py<PyAny>> = GILOnceCell::new();

fn compress_plaintext(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(COMPRESS.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py.import("sessionstream.core.privacy")?.getattr("compress_plaintext")?.unbind())
    })?.bind(py))
}

use crate::crypto;
use crate::json;

mod delivery;
mod rules;

pub use delivery::DeliveryLog;

const MAX_DEPTH: usize = 64;
const CIPHER_CACHE: usize = 4096;

/// Not handled here: the caller takes the Python path.
struct Decline;

type R<T> = Result<T, Decline>;

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Tok {
    Key(String),
    Idx(usize),
}

/// One content field of a type's sealing plan (privacy._Leaf).
struct Leaf {
    parts: Vec<String>, // "[]" walks a list
    class: String,
    placeholder: String, // canonical JSON of its placeholder
}

struct Plan {
    leaves: Vec<Leaf>,
    known_top: Vec<String>,
    extra_class: String,
    extra_placeholder: String,
}

/// Where the clear text gets a placeholder instead of the value.
#[derive(Default)]
struct Node {
    placeholder: Option<String>,
    children: HashMap<Tok, Node>,
}

/// Where `Appender.append_many` stopped (named fields: sessionstream/_native.pyi).
#[pyclass(frozen, module = "sessionstream._native")]
pub struct ManyAppended {
    /// the index of the first item not produced (the length of the items: all were)
    #[pyo3(get)]
    next: usize,
    /// None when that item was not started (declined before any change, or not a Draft
    /// or pair: the caller appends it on the ordinary path, which raises what it
    /// raises); else (event, record or None) stamped into the session but not produced
    /// (over the limit, refused by the producer, or its record left to Python)
    #[pyo3(get)]
    left: Option<Py<PyAny>>,
    /// records produced since the last poll (the caller carries it to the next call)
    #[pyo3(get)]
    since_poll: usize,
}

#[pyclass(module = "sessionstream._native")]
pub struct Appender {
    header: Vec<u8>,
    frozen_map: Py<PyAny>,
    frozen_list: Py<PyAny>,
    plans: HashMap<String, Plan>,
    ciphers: HashMap<Vec<u8>, Aes256Gcm>,
    /// The session rules of each type seen (None: a type the extension leaves to
    /// Python: unknown, or one whose rules change the session's state).
    rules: HashMap<String, Option<rules::Rules>>,
    /// What `append` needs from Python, handed in once by `bind`.
    bound: Option<rules::Bound_>,
    /// FrozenMap's construction is dict's own (no `__new__`/`__init__` in its class
    /// body): `new_frozen_map` may call dict's tp_new directly.
    frozen_map_plain: bool,
    /// The canonical text buffer `append` renders into, kept between calls.
    text: String,
}

fn put_long(out: &mut Vec<u8>, v: i64) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    while n > 0x7F {
        out.push(((n & 0x7F) as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_long(out, b.len() as i64);
    out.extend_from_slice(b);
}

/// Take a frozen container out of the cyclic garbage collector's lists: it holds only
/// scalars and other frozen containers, all made by this walk, and is read-only, so it
/// can never be part of a reference cycle (a writer keeps every event it wrote; without
/// this, each collection of the oldest generation walks all their data again).
pub(crate) fn untrack(obj: &Bound<'_, PyAny>) {
    // SAFETY: obj is a live GC-tracked container (a dict or tuple subclass instance).
    unsafe {
        if pyo3::ffi::PyObject_GC_IsTracked(obj.as_ptr()) != 0 {
            pyo3::ffi::PyObject_GC_UnTrack(obj.as_ptr().cast());
        }
    }
}

/// Whether `cls` is a direct subclass of dict whose class body defines neither
/// `__new__` nor `__init__` (so `cls()` is dict's tp_new and a no-op dict init).
fn plain_dict_subclass(cls: &Bound<'_, PyAny>) -> bool {
    let py = cls.py();
    let Ok(t) = cls.downcast::<pyo3::types::PyType>() else { return false };
    let dict_type = py.get_type::<PyDict>();
    let bases_ok = t.getattr("__bases__").ok()
        .and_then(|b| b.downcast_into::<PyTuple>().ok())
        .is_some_and(|b| b.len() == 1 && b.get_item(0).is_ok_and(|x| x.is(&dict_type)));
    let own = t.getattr("__dict__").ok();
    let defines = |name: &str| own.as_ref().is_none_or(|d| d.contains(name).unwrap_or(true));
    bases_ok && !defines("__new__") && !defines("__init__")
}

fn is_type(obj: &Bound<'_, PyAny>, t: &Py<PyAny>) -> bool {
    obj.get_type().is(t.bind(obj.py()))
}

fn exact_str<'a>(obj: &'a Bound<'_, PyAny>) -> R<&'a Bound<'a, PyString>> {
    if !obj.is_exact_instance_of::<PyString>() {
        return Err(Decline);
    }
    obj.downcast::<PyString>().map_err(|_| Decline)
}

/// A str field (exact str or a str subclass such as a StrEnum member).
fn text_of(obj: &Bound<'_, PyAny>) -> R<String> {
    let s = obj.downcast::<PyString>().map_err(|_| Decline)?;
    s.to_str().map(str::to_owned).map_err(|_| Decline)
}

fn long_of(obj: &Bound<'_, PyAny>) -> R<i64> {
    if !obj.is_exact_instance_of::<PyInt>() {
        return Err(Decline);
    }
    obj.extract::<i64>().map_err(|_| Decline)
}

fn opt_text(obj: &Bound<'_, PyAny>) -> R<Option<String>> {
    if obj.is_none() {
        Ok(None)
    } else {
        text_of(obj).map(Some)
    }
}

fn put_opt(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        None => out.push(0),
        Some(s) => {
            out.push(2);
            put_bytes(out, s.as_bytes());
        }
    }
}

/// The envelope's fields (schema v2), borrowed.
struct Env<'a> {
    format_version: i64,
    session_id: &'a str,
    seq: i64,
    event_id: &'a str,
    time: i64,
    etype: &'a str,
    op: i64,
    seqs: &'a [i64],
    writer_id: &'a str,
    epoch: i64,
    ignorable: bool,
    turn_id: Option<&'a str>,
    step_id: Option<&'a str>,
    prev: Option<&'a str>,
}

/// One sealed part of the envelope, ready to write.
struct SealedOut {
    class: String,
    key_session: String,
    origin: String,
    paths: Vec<String>,
    nonce: Vec<u8>,
    ciphertext: Vec<u8>,
}

impl Appender {
    /// An empty FrozenMap, by its type's own `tp_new` (dict's: FrozenMap has no
    /// `__new__` or `__init__` of its own, which `new` checked), without the call
    /// protocol and dict's `__init__` argument parsing of `FrozenMap()`.
    fn new_frozen_map<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let cls = self.frozen_map.bind(py);
        if !self.frozen_map_plain {
            return cls.call0();
        }
        // SAFETY: frozen_map is a live heap type (a Python class); Py_tp_new of it is
        // dict's tp_new (checked in `new`), called as type_call calls it.
        unsafe {
            let tp = cls.as_ptr() as *mut pyo3::ffi::PyTypeObject;
            let slot = pyo3::ffi::PyType_GetSlot(tp, pyo3::ffi::Py_tp_new);
            if slot.is_null() {
                return cls.call0();
            }
            let new: pyo3::ffi::newfunc = std::mem::transmute(slot);
            let args = PyTuple::empty(py);
            Bound::from_owned_ptr_or_err(py, new(tp, args.as_ptr(), std::ptr::null_mut()))
        }
    }

    /// check_and_freeze + canonical text of one value (see the module doc).
    fn freeze_into<'py>(&self, v: &Bound<'py, PyAny>, out: &mut String, depth: usize)
        -> R<Bound<'py, PyAny>> {
        let py = v.py();
        if v.is_none() {
            out.push_str("null");
            return Ok(v.clone());
        }
        if v.is_exact_instance_of::<PyBool>() {
            out.push_str(if v.is_truthy().map_err(|_| Decline)? { "true" } else { "false" });
            return Ok(v.clone());
        }
        if v.is_exact_instance_of::<PyString>() {
            let s = v.downcast::<PyString>().map_err(|_| Decline)?;
            write_str(out, s.to_str().map_err(|_| Decline)?);
            return Ok(v.clone());
        }
        if v.is_exact_instance_of::<PyInt>() {
            let i: i64 = v.extract().map_err(|_| Decline)?;
            json::write_int(out, i);
            return Ok(v.clone());
        }
        if v.is_exact_instance_of::<PyFloat>() {
            let f = v.downcast::<PyFloat>().map_err(|_| Decline)?.value();
            if !f.is_finite() {
                return Err(Decline);
            }
            json::write_float(out, f);
            return Ok(v.clone());
        }
        let is_dict = v.is_exact_instance_of::<PyDict>() || is_type(v, &self.frozen_map);
        if is_dict {
            if depth >= MAX_DEPTH {
                return Err(Decline);
            }
            let d = v.downcast::<PyDict>().map_err(|_| Decline)?;
            let mut items: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = Vec::with_capacity(d.len());
            for (k, x) in d.iter() {
                exact_str(&k)?.to_str().map_err(|_| Decline)?;
                items.push((k, x));
            }
            let mut order: Vec<usize> = (0..items.len()).collect();
            // Code point order = UTF-8 byte order (Python's sort_keys on str keys).
            let keys: Vec<&str> = items.iter()
                .map(|(k, _)| k.downcast::<PyString>().unwrap().to_str().unwrap())
                .collect();
            order.sort_by(|a, b| keys[*a].as_bytes().cmp(keys[*b].as_bytes()));
            let mut frozen: Vec<Option<Bound<'py, PyAny>>> = vec![None; items.len()];
            out.push('{');
            for (n, i) in order.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_str(out, keys[*i]);
                out.push(':');
                frozen[*i] = Some(self.freeze_into(&items[*i].1, out, depth + 1)?);
            }
            out.push('}');
            // An empty FrozenMap filled through the C API (PyDict_SetItem does not go
            // through the read-only Python-level __setitem__): no second copy.
            let copy = self.new_frozen_map(py).map_err(|_| Decline)?;
            let dict = copy.downcast::<PyDict>().map_err(|_| Decline)?;
            for (i, (k, _)) in items.iter().enumerate() {
                dict.set_item(k, frozen[i].take().unwrap()).map_err(|_| Decline)?;
            }
            untrack(&copy);
            return Ok(copy);
        }
        let is_list = v.is_exact_instance_of::<PyList>() || is_type(v, &self.frozen_list);
        if is_list {
            if depth >= MAX_DEPTH {
                return Err(Decline);
            }
            let mut items = Vec::new();
            out.push('[');
            for (n, x) in v.try_iter().map_err(|_| Decline)?.enumerate() {
                if n > 0 {
                    out.push(',');
                }
                let x = x.map_err(|_| Decline)?;
                items.push(self.freeze_into(&x, out, depth + 1)?);
            }
            out.push(']');
            let list = PyList::new(py, items).map_err(|_| Decline)?;
            let frozen = self.frozen_list.bind(py).call1((list,)).map_err(|_| Decline)?;
            untrack(&frozen);
            return Ok(frozen);
        }
        Err(Decline)
    }

    /// Canonical text of an already frozen value, with placeholders where `node` says.
    fn write_clear(&self, v: &Bound<'_, PyAny>, out: &mut String, node: Option<&Node>,
                   depth: usize) -> R<()> {
        if let Some(n) = node {
            if let Some(p) = &n.placeholder {
                out.push_str(p);
                return Ok(());
            }
        }
        if depth > MAX_DEPTH + 1 {
            return Err(Decline);
        }
        if v.is_none() {
            out.push_str("null");
        } else if v.is_exact_instance_of::<PyBool>() {
            out.push_str(if v.is_truthy().map_err(|_| Decline)? { "true" } else { "false" });
        } else if v.is_exact_instance_of::<PyString>() {
            write_str(out, v.downcast::<PyString>().map_err(|_| Decline)?.to_str()
                .map_err(|_| Decline)?);
        } else if v.is_exact_instance_of::<PyInt>() {
            json::write_int(out, v.extract().map_err(|_| Decline)?);
        } else if v.is_exact_instance_of::<PyFloat>() {
            let f = v.downcast::<PyFloat>().map_err(|_| Decline)?.value();
            if !f.is_finite() {
                return Err(Decline);
            }
            json::write_float(out, f);
        } else if v.is_exact_instance_of::<PyDict>() || is_type(v, &self.frozen_map) {
            let d = v.downcast::<PyDict>().map_err(|_| Decline)?;
            let mut items = Vec::with_capacity(d.len());
            for (k, x) in d.iter() {
                let key = exact_str(&k)?.to_str().map_err(|_| Decline)?.to_owned();
                items.push((key, x));
            }
            items.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (n, (k, x)) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_str(out, k);
                out.push(':');
                let child = node.and_then(|nd| nd.children.get(&Tok::Key(k.clone())));
                self.write_clear(x, out, child, depth + 1)?;
            }
            out.push('}');
        } else if v.is_exact_instance_of::<PyList>() || is_type(v, &self.frozen_list) {
            out.push('[');
            for (n, x) in v.try_iter().map_err(|_| Decline)?.enumerate() {
                if n > 0 {
                    out.push(',');
                }
                let x = x.map_err(|_| Decline)?;
                let child = node.and_then(|nd| nd.children.get(&Tok::Idx(n)));
                self.write_clear(&x, out, child, depth + 1)?;
            }
            out.push(']');
        } else {
            return Err(Decline);
        }
        Ok(())
    }

    fn is_mapping(&self, v: &Bound<'_, PyAny>) -> bool {
        v.is_exact_instance_of::<PyDict>() || is_type(v, &self.frozen_map)
    }

    fn is_seq(&self, v: &Bound<'_, PyAny>) -> bool {
        v.is_exact_instance_of::<PyList>() || is_type(v, &self.frozen_list)
    }

    /// privacy._walk: every (pointer tokens, value) the leaf's parts reach.
    fn walk<'py>(&self, v: &Bound<'py, PyAny>, parts: &[String], prefix: &mut Vec<Tok>,
                 found: &mut Vec<(Vec<Tok>, Bound<'py, PyAny>)>) -> R<()> {
        let Some((head, rest)) = parts.split_first() else {
            found.push((prefix.clone(), v.clone()));
            return Ok(());
        };
        if head == "[]" {
            if self.is_seq(v) {
                for (i, x) in v.try_iter().map_err(|_| Decline)?.enumerate() {
                    let x = x.map_err(|_| Decline)?;
                    prefix.push(Tok::Idx(i));
                    self.walk(&x, rest, prefix, found)?;
                    prefix.pop();
                }
            } else if v.downcast::<PyTuple>().is_ok() || v.downcast::<PyList>().is_ok() {
                return Err(Decline);
            }
            return Ok(());
        }
        if self.is_mapping(v) {
            let d = v.downcast::<PyDict>().map_err(|_| Decline)?;
            if let Some(x) = d.get_item(head.as_str()).map_err(|_| Decline)? {
                prefix.push(Tok::Key(head.clone()));
                self.walk(&x, rest, prefix, found)?;
                prefix.pop();
            }
        } else if v.downcast::<PyDict>().is_ok() {
            return Err(Decline); // another Mapping: leave it to Python
        }
        Ok(())
    }

    fn cipher(&mut self, key: &[u8]) -> R<Aes256Gcm> {
        if key.len() != crypto::KEY_BYTES {
            return Err(Decline);
        }
        if let Some(c) = self.ciphers.get(key) {
            return Ok(c.clone());
        }
        let c = Aes256Gcm::new(key).ok_or(Decline)?;
        if self.ciphers.len() >= CIPHER_CACHE {
            self.ciphers.clear();
        }
        self.ciphers.insert(key.to_vec(), c.clone());
        Ok(c)
    }

    fn envelope<'py>(&self, event: &Bound<'py, PyAny>, text: &str, sealed: &[SealedOut])
        -> R<Vec<u8>> {
        let py = event.py();
        let get = |name: &Bound<'py, PyString>| event.getattr(name).map_err(|_| Decline);
        let format_version = long_of(&get(pyo3::intern!(py, "format_version"))?)?;
        if !(i32::MIN as i64..=i32::MAX as i64).contains(&format_version) {
            return Err(Decline);
        }
        let session_id = text_of(&get(pyo3::intern!(py, "session_id"))?)?;
        let seq = long_of(&get(pyo3::intern!(py, "seq"))?)?;
        let event_id = text_of(&get(pyo3::intern!(py, "event_id"))?)?;
        let time = long_of(&get(pyo3::intern!(py, "time"))?)?;
        let etype = text_of(&get(pyo3::intern!(py, "type"))?)?;
        let op = text_of(&get(pyo3::intern!(py, "surface_op"))?)?;
        let op = match op.as_str() {
            "none" => 0,
            "append" => 1,
            "replace" => 2,
            _ => return Err(Decline),
        };
        let seqs_obj = get(pyo3::intern!(py, "source_event_seqs"))?;
        let mut seqs: Vec<i64> = Vec::new();
        for x in seqs_obj.try_iter().map_err(|_| Decline)? {
            seqs.push(long_of(&x.map_err(|_| Decline)?)?);
        }
        let writer = get(pyo3::intern!(py, "writer"))?;
        let writer_id = text_of(&writer.getattr(pyo3::intern!(py, "id")).map_err(|_| Decline)?)?;
        let epoch = long_of(&writer.getattr(pyo3::intern!(py, "epoch")).map_err(|_| Decline)?)?;
        let ignorable = get(pyo3::intern!(py, "ignorable"))?;
        if !ignorable.is_exact_instance_of::<PyBool>() {
            return Err(Decline);
        }
        let ignorable = ignorable.is_truthy().map_err(|_| Decline)?;
        let turn_id = opt_text(&get(pyo3::intern!(py, "turn_id"))?)?;
        let step_id = opt_text(&get(pyo3::intern!(py, "step_id"))?)?;
        let prev = opt_text(&get(pyo3::intern!(py, "prev_event_id"))?)?;

        let env = Env { format_version, session_id: &session_id, seq, event_id: &event_id,
                        time, etype: &etype, op, seqs: &seqs, writer_id: &writer_id, epoch,
                        ignorable, turn_id: turn_id.as_deref(), step_id: step_id.as_deref(),
                        prev: prev.as_deref() };
        Ok(self.write_envelope(&env, text, sealed))
    }

    /// The Avro body of schema v2 after the header, from its parts.
    fn write_envelope(&self, e: &Env<'_>, text: &str, sealed: &[SealedOut]) -> Vec<u8> {
        let (format_version, session_id, seq, event_id, time, etype, op, seqs, writer_id,
             epoch, ignorable, turn_id, step_id, prev) =
            (e.format_version, e.session_id, e.seq, e.event_id, e.time, e.etype, e.op, e.seqs,
             e.writer_id, e.epoch, e.ignorable, e.turn_id, e.step_id, e.prev);
        let mut out = Vec::with_capacity(self.header.len() + text.len() + 160);
        out.extend_from_slice(&self.header);
        put_long(&mut out, format_version);
        put_bytes(&mut out, session_id.as_bytes());
        put_long(&mut out, seq);
        put_bytes(&mut out, event_id.as_bytes());
        put_long(&mut out, time);
        put_bytes(&mut out, etype.as_bytes());
        put_bytes(&mut out, text.as_bytes());
        put_long(&mut out, op);
        if !seqs.is_empty() {
            put_long(&mut out, seqs.len() as i64);
            for s in seqs {
                put_long(&mut out, *s);
            }
        }
        out.push(0);
        put_bytes(&mut out, writer_id.as_bytes());
        put_long(&mut out, epoch);
        out.push(ignorable as u8);
        put_opt(&mut out, turn_id);
        put_opt(&mut out, step_id);
        put_opt(&mut out, prev);
        if !sealed.is_empty() {
            put_long(&mut out, sealed.len() as i64);
            for p in sealed {
                put_bytes(&mut out, p.class.as_bytes());
                put_bytes(&mut out, p.key_session.as_bytes());
                put_bytes(&mut out, p.origin.as_bytes());
                if !p.paths.is_empty() {
                    put_long(&mut out, p.paths.len() as i64);
                    for path in &p.paths {
                        put_bytes(&mut out, path.as_bytes());
                    }
                }
                out.push(0);
                put_bytes(&mut out, &p.nonce);
                put_bytes(&mut out, &p.ciphertext);
            }
        }
        out.push(0);
        out
    }
}

/// Whether a byte of `bytes` is a control character, `"` or `\\`: sixteen bytes per
/// step with SSE2 (every x86-64 has it), then `needs_escape_words` for the tail.
#[cfg(target_arch = "x86_64")]
fn needs_escape(bytes: &[u8]) -> bool {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, __m128i,
    };
    let mut at = 0;
    // SAFETY: SSE2 is part of x86-64; every load reads 16 bytes inside `bytes`.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let control = _mm_set1_epi8(0x1F);
        while at + 16 <= bytes.len() {
            let x = _mm_loadu_si128(bytes.as_ptr().add(at) as *const __m128i);
            // x <= 0x1F (unsigned) exactly when min(x, 0x1F) == x.
            let low = _mm_cmpeq_epi8(_mm_min_epu8(x, control), x);
            let hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote),
                                                _mm_cmpeq_epi8(x, backslash)), low);
            if _mm_movemask_epi8(hit) != 0 {
                return true;
            }
            at += 16;
        }
    }
    needs_escape_words(&bytes[at..])
}

#[cfg(not(target_arch = "x86_64"))]
fn needs_escape(bytes: &[u8]) -> bool {
    needs_escape_words(bytes)
}

/// `needs_escape` eight bytes at a time (the has-less-than / has-zero-byte bit
/// tricks, exact as an "any").
fn needs_escape_words(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let x = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        let q = x ^ (ONES * 0x22);
        let quote = q.wrapping_sub(ONES) & !q & HIGH;
        let b = x ^ (ONES * 0x5C);
        let backslash = b.wrapping_sub(ONES) & !b & HIGH;
        if control | quote | backslash != 0 {
            return true;
        }
    }
    chunks.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// `json::write_str`, copying the runs that need no escape at once.
fn write_str(out: &mut String, s: &str) {
    if !needs_escape(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    json::write_str(out, s);
}

fn pointer(toks: &[Tok]) -> String {
    let mut s = String::new();
    for t in toks {
        s.push('/');
        match t {
            Tok::Key(k) => s.push_str(&k.replace('~', "~0").replace('/', "~1")),
            Tok::Idx(i) => s.push_str(&i.to_string()),
        }
    }
    s
}

/// The data classes in `privacy.ALL_CLASSES` order (the parts' order).
const CLASS_ORDER: [&str; 4] = ["raw", "surface", "business", "reasoning"];

#[pymethods]
impl Appender {
    /// `header`: the writer schema's single-object header (magic + fingerprint; the
    /// caller checks the schema is v2); the FrozenMap and FrozenList types.
    #[new]
    fn new(py: Python<'_>, header: Vec<u8>, frozen_map: Py<PyAny>, frozen_list: Py<PyAny>)
        -> Self {
        let plain = plain_dict_subclass(frozen_map.bind(py));
        Appender { header, frozen_map, frozen_list, plans: HashMap::new(),
                   ciphers: HashMap::new(), rules: HashMap::new(), bound: None,
                   frozen_map_plain: plain, text: String::new() }
    }

    /// Hand in what `append` builds events with: `events.decoded_event`, the SurfaceOp
    /// members (none, append, replace), the default id source and clock
    /// (`uuid4_ids`, `system_clock`: done natively when a session uses them), the
    /// function giving a type's rules (`rules_for(session, type)`, see
    /// producers/native_append.py), the format version, and the largest data text the
    /// writer accepts (bytes; larger: declined, the writer raises MessageTooLarge), and
    /// the Event class (optional): when its slot layout checks out (rules::
    /// verified_layout) events are filled in place rather than through `make_event`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (make_event, ops, uuid4_ids, system_clock, rules_for, format_version,
                        data_limit, event_cls=None))]
    fn bind(&mut self, py: Python<'_>, make_event: Py<PyAny>, ops: Vec<Py<PyAny>>,
            uuid4_ids: Py<PyAny>, system_clock: Py<PyAny>, rules_for: Py<PyAny>,
            format_version: i64, data_limit: i64, event_cls: Option<Py<PyAny>>)
        -> PyResult<()> {
        if ops.len() != 3 {
            return Err(pyo3::exceptions::PyValueError::new_err("three SurfaceOp members"));
        }
        let layout = match event_cls {
            Some(cls) => rules::verified_layout(py, cls.bind(py))?.map(|o| (cls, o)),
            None => None,
        };
        self.bound = Some(rules::Bound_ { make_event, layout, ops, uuid4_ids, system_clock,
                                          rules_for, format_version, data_limit });
        Ok(())
    }

    /// Session.append of one draft (given by its parts) for the types whose rules the
    /// extension holds (docs/adr/0016): checks, stamps and adds the event to `session`,
    /// and returns (event, record), the record None when `record` is False (or when
    /// sealing is left to Python). `seal`: None (clear), or (tenant, key_for(class) ->
    /// key, nonces(n) -> bytes or None for the extension's own random bytes,
    /// plan_for(type) -> set_plan's arguments) to seal as ContentCipher does. None:
    /// declined before any change (and before the id source or clock was called): the
    /// caller takes the Python path, which raises what Python raises.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (session, etype, data, surface_op, source_event_seqs, turn_id,
                        step_id, record, seal=None))]
    fn append<'py>(&mut self, py: Python<'py>, session: &Bound<'py, PyAny>,
                   etype: &Bound<'py, PyAny>, data: &Bound<'py, PyAny>,
                   surface_op: &Bound<'py, PyAny>, source_event_seqs: &Bound<'py, PyAny>,
                   turn_id: &Bound<'py, PyAny>, step_id: &Bound<'py, PyAny>, record: bool,
                   seal: Option<&Bound<'py, PyAny>>)
        -> PyResult<Option<(Bound<'py, PyAny>, Option<Bound<'py, PyBytes>>)>> {
        self.append_impl(py, session, etype, data, surface_op, source_event_seqs, turn_id,
                         step_id, record, seal)
    }

    /// The writer's batch append (SessionWriter.append_many): `append` of each of
    /// `items[start..]` (a Draft, or a `(type, data)` pair), each record handed straight
    /// to the producer, with the writer's bookkeeping done here. `batch` names what it
    /// uses (read by attribute, once per call: producers.native_append.BatchProduce):
    /// `draft` (the Draft class), `seal` (as `append`'s), `produce(topic, value, key,
    /// -1, log)` and `poll(0)` of the sender's producer, its `topic` and delivery `log`,
    /// the lists it fills per record produced (`records[event_id] = value`, the event
    /// onto `mine`, its id onto `waiting` and `sent`), `poll_every` and `since_poll`
    /// (one poll per that many records, the count carried across calls), the record
    /// `key` and its `limit` (bytes, key included). Stops at the first item it does
    /// not finish: the `ManyAppended` says which, and the leftover.
    fn append_many<'py>(&mut self, py: Python<'py>, session: &Bound<'py, PyAny>,
                        items: &Bound<'py, PyAny>, start: usize, batch: &Bound<'py, PyAny>)
        -> PyResult<ManyAppended> {
        let get = |name: &Bound<'py, PyString>| batch.getattr(name);
        let draft = get(pyo3::intern!(py, "draft"))?;
        let seal = get(pyo3::intern!(py, "seal"))?;
        let seal = if seal.is_none() { None } else { Some(&seal) };
        let produce = get(pyo3::intern!(py, "produce"))?;
        let poll = get(pyo3::intern!(py, "poll"))?;
        let topic = get(pyo3::intern!(py, "topic"))?;
        let log = get(pyo3::intern!(py, "log"))?;
        let sent = get(pyo3::intern!(py, "sent"))?;
        let sent = sent.downcast::<PyList>()?;
        let mut since_poll: usize = get(pyo3::intern!(py, "since_poll"))?.extract()?;
        let poll_every: usize = get(pyo3::intern!(py, "poll_every"))?.extract()?;
        let key = get(pyo3::intern!(py, "key"))?;
        let key = key.downcast::<PyBytes>()?;
        let limit: usize = get(pyo3::intern!(py, "limit"))?.extract()?;
        let records = get(pyo3::intern!(py, "records"))?;
        let records = records.downcast::<PyDict>()?;
        let mine = get(pyo3::intern!(py, "mine"))?;
        let mine = mine.downcast::<PyList>()?;
        let waiting = get(pyo3::intern!(py, "waiting"))?;
        let waiting = waiting.downcast::<PyList>()?;
        let seq = items.downcast::<pyo3::types::PySequence>()?;
        let n = seq.len()?;
        let none = py.None().into_bound(py);
        let empty = PyTuple::empty(py).into_any();
        let key_len = key.as_bytes().len();
        let minus_one = (-1i64).into_pyobject(py)?.into_any();
        let stopped = |next: usize, left: Option<(Bound<'py, PyAny>, Option<Bound<'py, PyBytes>>)>,
                       since_poll: usize| -> PyResult<ManyAppended> {
            let left = match left {
                None => None,
                Some((event, value)) => Some((event, value)).map(|v| v.into_pyobject(py))
                    .transpose()?.map(|t| t.into_any().unbind()),
            };
            Ok(ManyAppended { next, left, since_poll })
        };
        let mut i = start;
        while i < n {
            let item = seq.get_item(i)?;
            let done = if let Ok(t) = item.downcast_exact::<PyTuple>() {
                if t.len() != 2 {
                    break;
                }
                let data = t.get_item(1)?;
                let data = if data.is_none() { PyDict::new(py).into_any() } else { data };
                self.append_impl(py, session, &t.get_item(0)?, &data, &none, &empty, &none,
                                 &none, true, seal)?
            } else if item.get_type().is(&draft) {
                let g = |name: &Bound<'py, PyString>| item.getattr(name);
                self.append_impl(py, session, &g(pyo3::intern!(py, "type"))?,
                                 &g(pyo3::intern!(py, "data"))?,
                                 &g(pyo3::intern!(py, "surface_op"))?,
                                 &g(pyo3::intern!(py, "source_event_seqs"))?,
                                 &g(pyo3::intern!(py, "turn_id"))?,
                                 &g(pyo3::intern!(py, "step_id"))?, true, seal)?
            } else {
                None
            };
            let Some((event, value)) = done else { break };
            let Some(value) = value else {
                // Stamped, its record left to Python (sealing it needs the reference).
                return stopped(i, Some((event, None)), since_poll);
            };
            if value.as_bytes().len() + key_len > limit {
                return stopped(i, Some((event, Some(value))), since_poll);
            }
            if produce.call1((&topic, &value, key, &minus_one, &log)).is_err() {
                // BufferError (queue full) or a KafkaException: the caller's _produce
                // waits for room or maps the error, as for one append.
                return stopped(i, Some((event, Some(value))), since_poll);
            }
            let eid = event.getattr(pyo3::intern!(py, "event_id"))?;
            records.set_item(&eid, &value)?;
            mine.append(&event)?;
            waiting.append(&eid)?;
            sent.append(&eid)?;
            since_poll += 1;
            if since_poll >= poll_every {
                since_poll = 0;
                poll.call1((0,))?;
            }
            i += 1;
        }
        stopped(i, None, since_poll)
    }

    /// Whether `append` fills events in place (the Event layout checked out at bind).
    #[getter]
    fn fills_in_place(&self) -> bool {
        self.bound.as_ref().is_some_and(|b| b.layout.is_some())
    }

    /// A fresh per-sender delivery log (see DeliveryLog): records whose value starts
    /// with this appender's header are identified by the seq and event id they carry.
    fn delivery_log(&self) -> DeliveryLog {
        DeliveryLog::new(self.header.clone())
    }

    /// In a forked child: drop the random bytes the parent drew for event ids.
    #[staticmethod]
    fn after_fork() {
        rules::after_fork();
    }

    /// One random (version 4) UUID in canonical text, as `events.uuid4_ids` makes.
    #[staticmethod]
    fn uuid4() -> String {
        rules::uuid4()
    }

    /// (frozen value, canonical text, its UTF-8 length), or None: not plain lossless JSON.
    fn freeze<'py>(&self, data: &Bound<'py, PyAny>)
        -> PyResult<Option<(Bound<'py, PyAny>, String, usize)>> {
        let mut out = String::with_capacity(256);
        match self.freeze_into(data, &mut out, 0) {
            Ok(frozen) => {
                let n = out.len();
                Ok(Some((frozen, out, n)))
            }
            Err(Decline) => Ok(None),
        }
    }

    /// The clear record of a stamped event whose data's canonical text is `text`.
    fn encode<'py>(&self, py: Python<'py>, event: &Bound<'py, PyAny>, text: &str)
        -> PyResult<Option<Bound<'py, PyBytes>>> {
        Ok(self.envelope(event, text, &[]).ok().map(|b| PyBytes::new(py, &b)))
    }

    fn has_plan(&self, etype: &str) -> bool {
        self.plans.contains_key(etype)
    }

    /// Register a type's sealing plan: leaves (parts, class, placeholder text), the
    /// top-level names the catalog knows, the class (and placeholder) of the others.
    fn set_plan(&mut self, etype: String, leaves: Vec<(Vec<String>, String, String)>,
                known_top: Vec<String>, extra_class: String, extra_placeholder: String) {
        let leaves = leaves.into_iter()
            .map(|(parts, class, placeholder)| Leaf { parts, class, placeholder })
            .collect();
        self.plans.insert(etype, Plan { leaves, known_top, extra_class, extra_placeholder });
    }

    /// The sealed record (ContentCipher.seal_event with origin None, then encode) of a
    /// stamped event whose data is frozen and whose canonical text is `text`:
    /// `key_for(class)` gives the session's data key of a class (called once per class
    /// that has content, in part order; its exceptions propagate), `nonces` holds 12
    /// bytes per part. None: not handled here (use the Python reference).
    fn seal<'py>(&mut self, py: Python<'py>, event: &Bound<'py, PyAny>, text: &str,
                 tenant: &str, key_for: &Bound<'py, PyAny>, nonces: &[u8])
        -> PyResult<Option<Bound<'py, PyBytes>>> {
        let done = |r: R<Vec<u8>>| Ok(r.ok().map(|b| PyBytes::new(py, &b)));
        let Ok(etype) = event.getattr(pyo3::intern!(py, "type")).map_err(|_| Decline)
            .and_then(|t| text_of(&t)) else { return Ok(None) };
        let Ok(data) = event.getattr(pyo3::intern!(py, "data")) else { return Ok(None) };
        let ids = (|| -> R<(String, String, i64)> {
            Ok((text_of(&event.getattr(pyo3::intern!(py, "session_id")).map_err(|_| Decline)?)?,
                text_of(&event.getattr(pyo3::intern!(py, "event_id")).map_err(|_| Decline)?)?,
                long_of(&event.getattr(pyo3::intern!(py, "seq")).map_err(|_| Decline)?)?))
        })();
        let Ok((session_id, event_id, seq)) = ids else { return Ok(None) };
        match self.seal_parts(&etype, &data, tenant, &session_id, &event_id, seq, key_for,
                              nonces)? {
            None => Ok(None),
            Some((None, _)) => done(self.envelope(event, text, &[])),
            Some((Some(clear), sealed)) => done(self.envelope(event, &clear, &sealed)),
        }
    }
}

impl Appender {
    /// ContentCipher.seal's split and encryption of a stamped event's frozen `data` by
    /// its type's plan (registered with set_plan): Some((None, _)) when there is
    /// nothing to seal, Some((clear text with placeholders, sealed parts)), or None:
    /// not handled here. `key_for(class)`'s exceptions propagate.
    #[allow(clippy::too_many_arguments, clippy::type_complexity)]
    fn seal_parts<'py>(&mut self, etype: &str, data: &Bound<'py, PyAny>, tenant: &str,
                       session_id: &str, event_id: &str, seq: i64,
                       key_for: &Bound<'py, PyAny>, nonces: &[u8])
        -> PyResult<Option<(Option<String>, Vec<SealedOut>)>> {
        let Some(plan) = self.plans.get(etype) else { return Ok(None) };
        if !self.is_mapping(data) {
            if data.downcast::<PyDict>().is_ok() {
                return Ok(None);
            }
            return Ok(Some((None, Vec::new())));
        }
        // (class, tokens, value, placeholder) in the order split() finds them.
        let mut found: Vec<(String, Vec<Tok>, Bound<'py, PyAny>, String)> = Vec::new();
        let mut prefix = Vec::new();
        for leaf in &plan.leaves {
            let mut hits = Vec::new();
            if self.walk(data, &leaf.parts, &mut prefix, &mut hits).is_err() {
                return Ok(None);
            }
            for (toks, v) in hits {
                if !v.is_none() {
                    found.push((leaf.class.clone(), toks, v, leaf.placeholder.clone()));
                }
            }
        }
        let d = data.downcast::<PyDict>().map_err(|_| pyo3::exceptions::PyTypeError::new_err("data"))?;
        for (k, v) in d.iter() {
            let Ok(name) = exact_str(&k).and_then(|s| s.to_str().map_err(|_| Decline)) else {
                return Ok(None);
            };
            if !plan.known_top.iter().any(|t| t == name) && !v.is_none() {
                found.push((plan.extra_class.clone(), vec![Tok::Key(name.to_owned())], v,
                            plan.extra_placeholder.clone()));
            }
        }
        if found.is_empty() {
            return Ok(Some((None, Vec::new())));
        }
        // The placeholders' tree; a path inside another sealed path: Python decides.
        let mut root = Node::default();
        for (_, toks, _, ph) in &found {
            let mut node = &mut root;
            for t in toks {
                if node.placeholder.is_some() {
                    return Ok(None);
                }
                node = node.children.entry(t.clone()).or_default();
            }
            if node.placeholder.is_some() || !node.children.is_empty() {
                return Ok(None);
            }
            node.placeholder = Some(ph.clone());
        }
        let mut clear = String::new();
        if self.write_clear(data, &mut clear, Some(&root), 0).is_err() {
            return Ok(None);
        }
        // A class outside CLASS_ORDER: Python decides.
        if found.iter().any(|f| !CLASS_ORDER.contains(&f.0.as_str())) {
            return Ok(None);
        }
        let mut sealed = Vec::new();
        for class in CLASS_ORDER {
            let mine: Vec<&(String, Vec<Tok>, Bound<'py, PyAny>, String)> =
                found.iter().filter(|f| f.0 == class).collect();
            if mine.is_empty() {
                continue;
            }
            if sealed.len() >= nonces.len() / crypto::NONCE_BYTES {
                return Ok(None);
            }
            let paths: Vec<String> = mine.iter().map(|f| pointer(&f.1)).collect();
            let mut plain = String::from("[");
            for (i, f) in mine.iter().enumerate() {
                if i > 0 {
                    plain.push(',');
                }
                if self.write_clear(&f.2, &mut plain, None, 0).is_err() {
                    return Ok(None);
                }
            }
            plain.push(']');
            let key = key_for.call1((class,))?;
            let Ok(key) = key.downcast::<PyBytes>() else { return Ok(None) };
            let Ok(cipher) = self.cipher(key.as_bytes()) else { return Ok(None) };
            let ad = crypto::associated_data(tenant, session_id, seq, event_id, etype,
                                             class, &paths);
            let at = sealed.len() * crypto::NONCE_BYTES;
            let nonce = nonces[at..at + crypto::NONCE_BYTES].to_vec();
            // Compressed before sealing by the core's own function (the one
            // implementation: the same record bytes whichever path sealed it).
            let framed;
            let plaintext: &[u8] = if plain.len() >= crypto::COMPRESS_FROM {
                framed = compress_plaintext(key.py())?.call1((PyBytes::new(key.py(),
                                                                           plain.as_bytes()),))?;
                let Ok(b) = framed.downcast::<PyBytes>() else { return Ok(None) };
                b.as_bytes()
            } else {
                plain.as_bytes()
            };
            let Some(ciphertext) = cipher.seal(&nonce, plaintext, &ad)
            else { return Ok(None) };
            sealed.push(SealedOut { class: class.to_owned(), key_session: session_id.to_owned(),
                                    origin: event_id.to_owned(), paths, nonce, ciphertext });
        }
        Ok(Some((Some(clear), sealed)))
    }

}

#[cfg(test)]
mod tests {
    use super::{needs_escape, needs_escape_words};

    #[test]
    fn needs_escape_finds_every_escaped_byte_at_every_offset() {
        for len in 0..40 {
            let clean: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(!needs_escape(&clean));
            let high = "é😀".repeat(len);
            assert!(!needs_escape(high.as_bytes()));
            for at in 0..len {
                for bad in [0u8, 0x1f, b'"', b'\\', b'\n'] {
                    let mut v = clean.clone();
                    v[at] = bad;
                    assert!(needs_escape(&v), "{len} {at} {bad}");
                }
                let mut v = clean.clone();
                v[at] = 0x20;
                assert!(!needs_escape(&v));
                for byte in 0..=255u8 {
                    v[at] = byte;
                    let want = byte < 0x20 || byte == b'"' || byte == b'\\';
                    assert_eq!(needs_escape(&v), want, "{len} {at} {byte}");
                    assert_eq!(needs_escape_words(&v), want, "{len} {at} {byte}");
                }
            }
        }
    }
}
