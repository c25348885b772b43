//! sessionstream._native (the crate sessionstream_native): the fold of the projection processor, per batch, in Rust.
//!
//! Bytes in, text out: `Folder.fold(records, progress)` takes one poll's records (the
//! Kafka values as they came), decodes each Avro single-object record by its schema
//! fingerprint, applies the admission rule per session and folds the built-in units
//! it implements (every built-in unit: index, turns, usage, plan, goal, rejections in
//! units.rs; tools, todo, business, compaction in units_more.rs; the surface in
//! surface.rs); `Folder.fields(sid)`
//! hands back the session's Redis fields (view/state texts, admission, meta). No
//! Python object is made per event, except for events whose type a custom Python unit
//! reads (their record indices are returned, so the caller decodes just those).
//!
//! What it does not handle it hands back to the caller, which folds it with the
//! Python reference (the same results by construction): records it cannot decode
//! (unknown fingerprint, corrupt, key mismatch: the caller dead-letters them with the
//! Python codec's message), and sessions whose events it cannot fold exactly
//! (a quarantine, data of an unexpected shape): `Folder.export(sid)` gives their state
//! as the same fields, from which the Python processor loads a cursor.
//!
//! Sealed content (ADR 0011) is opened here (crate::crypto) once `set_opener` gave the
//! tenant and the key store's lookup; the opened data of events a Python unit reads
//! is handed back in their envelopes, so they are neither decoded nor opened twice.

mod aead;
mod append;
mod avro;
mod chunks;
mod crypto;
mod decode;
mod json;
mod layout;
mod load;
mod undo;
mod messages;
mod resp;
mod rowseal;
mod rowwrite;
mod surface;
mod units;
mod units_more;

/// Rust's own allocations (the fold's maps, strings, JSON values) go through mimalloc;
/// Python objects are made and freed by CPython's allocator (PyO3 never hands a Rust
/// buffer to Python to free, nor frees a Python one), so the two never mix (ADR 0019).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::collections::BTreeMap;
use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::units::{Admission, Ev, Goal, Index, Plan, Rejections, Turns, Usage, Verdict};
use crate::units_more::More;

pub const NATIVE_UNITS: [&str; 11] = ["index", "turns", "usage", "plan", "goal", "rejections",
                                      "tools", "todo", "business", "compaction", "surface"];
const INDEX: u16 = 1;
const TURNS: u16 = 2;
const USAGE: u16 = 4;
const PLAN: u16 = 8;
const GOAL: u16 = 16;
const REJECTIONS: u16 = 32;
const SURFACE: u16 = 1024;
/// Every native unit's change bit and key.
const BITS: [(u16, &str); 11] = [
    (INDEX, "index"), (TURNS, "turns"), (USAGE, "usage"), (PLAN, "plan"), (GOAL, "goal"),
    (REJECTIONS, "rejections"), units_more::KEYS[0], units_more::KEYS[1], units_more::KEYS[2],
    units_more::KEYS[3], (SURFACE, "surface")];
/// The audit event of a deletion (streams.processor.SHRED_TYPE).
const SHRED_TYPE: &str = "session/shred";

/// The opener's seed length of a `session/start` (governance.opener._learn): an int
/// `lineage.seed_length` (Python's bool is an int), else 0.
fn seed_length(data: &serde_json::Value) -> i64 {
    match data.get("lineage").and_then(|l| l.as_object()).and_then(|l| l.get("seed_length")) {
        Some(serde_json::Value::Bool(b)) => *b as i64,
        Some(v) => json::as_int(v).unwrap_or(0),
        None => 0,
    }
}

#[derive(Clone)]
struct Sess {
    adm: Admission,
    partition: i64,
    as_of_seq: i64,
    as_of_offset: i64,
    first_offset: Option<i64>,
    last_time: Option<i64>,
    counts: BTreeMap<String, i64>,
    index: Index,
    turns: Turns,
    usage: Usage,
    plan: Plan,
    goal: Goal,
    rejections: Rejections,
    more: More,
    surface: surface::Surface,
    marks: chunks::Marks,
    changed: u16,
    /// The seed length learnt from this session's `session/start` (the opener's rule
    /// for inherited parts; None: not seen by this process, as the Python opener).
    seed: Option<i64>,
    /// This batch's admission verdicts other than `admitted` (the worker's metrics).
    verdicts: BTreeMap<&'static str, i64>,
}

impl Sess {
    fn new(sid: &str, partition: i64, window: i64) -> Sess {
        Sess {
            adm: Admission::new(sid, window),
            partition,
            as_of_seq: -1,
            as_of_offset: -1,
            first_offset: None,
            last_time: None,
            counts: BTreeMap::new(),
            index: Index::new(),
            turns: Turns::default(),
            usage: Usage::default(),
            plan: Plan::default(),
            goal: Goal::default(),
            rejections: Rejections::default(),
            more: More::default(),
            surface: surface::Surface::default(),
            marks: chunks::Marks::default(),
            changed: 0,
            seed: None,
            verdicts: BTreeMap::new(),
        }
    }

    /// (view, state) texts of the unit of `bit`.
    fn encode(&self, bit: u16) -> (String, String) {
        match bit {
            INDEX => {
                let t = self.index.text();
                (t.clone(), t)
            }
            TURNS => (self.turns.view(), self.turns.dump()),
            USAGE => (self.usage.view(), self.usage.dump()),
            PLAN => {
                let t = self.plan.text();
                (t.clone(), t)
            }
            GOAL => (self.goal.view(), self.goal.dump()),
            REJECTIONS => {
                let t = self.rejections.text();
                (t.clone(), t)
            }
            SURFACE => (self.surface.view(), self.surface.dump()),
            _ => self.more.encode(bit).unwrap_or_default(),
        }
    }

    fn count(&mut self, k: &str) {
        *self.counts.entry(k.to_string()).or_insert(0) += 1;
    }

    fn meta(&self) -> String {
        let mut o = String::with_capacity(200);
        o.push_str("{\"as_of_offset\":");
        json::write_int(&mut o, self.as_of_offset);
        o.push_str(",\"as_of_seq\":");
        json::write_int(&mut o, self.as_of_seq);
        o.push_str(",\"counts\":{");
        for (i, (k, v)) in self.counts.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            json::write_str(&mut o, k);
            o.push(':');
            json::write_int(&mut o, *v);
        }
        o.push_str("},\"first_offset\":");
        json::write_opt_int(&mut o, self.first_offset);
        o.push_str(",\"last_time\":");
        json::write_opt_int(&mut o, self.last_time);
        o.push_str(",\"partition\":");
        json::write_int(&mut o, self.partition);
        o.push_str(",\"quarantine\":null,\"session_id\":");
        json::write_str(&mut o, &self.adm.session_id);
        o.push('}');
        o
    }
}

/// One record of the batch, decoded; its sealed parts borrow from the record's bytes.
struct Item<'a> {
    idx: usize,
    offset: i64,
    ev: Ev,
    sealed: Vec<avro::SealedRef<'a>>,
}

#[pyclass]
pub struct Folder {
    schemas: avro::Schemas,
    format_version: i64,
    catalog: HashSet<String>,
    python_types: HashSet<String>,
    versions: HashMap<String, i64>,
    window: i64,
    /// Boxed: the map moves pointers when it grows, not whole sessions.
    sessions: HashMap<String, Box<Sess>>,
    /// How to undo the last fold of each session it folded (None: it was new).
    snapshots: HashMap<String, Option<undo::Checkpoint>>,
    opener: Option<OpenerConfig>,
    /// The native chunked units' collections (`set_chunk_shapes`), by unit key.
    shapes: HashMap<String, Vec<rowwrite::Shape>>,
    /// The last batch's record bytes (reused: its capacity stays).
    arena: Vec<u8>,
}

/// What `Folder.fold` made of a batch (named fields: sessionstream/_native.pyi).
#[pyclass(frozen, module = "sessionstream._native")]
pub struct FoldOut {
    /// list[int]: indices of the records the caller must decode (dead letters, or a
    /// record Python reads and this build does not)
    #[pyo3(get)]
    dead: Py<PyAny>,
    /// list[(session id, partition, indices of its admitted records a Python unit
    /// reads)]: the sessions folded here
    #[pyo3(get)]
    native: Py<PyAny>,
    /// list[(session id, indices of its records)]: the sessions handed to the caller
    /// (owned by it, or holding an event this fold does not fold exactly)
    #[pyo3(get)]
    handed: Py<PyAny>,
    /// dict[partition, the highest offset of the batch]
    #[pyo3(get)]
    high: Py<PyAny>,
    /// records skipped by the progress or a session's as_of_offset
    #[pyo3(get)]
    skipped: usize,
    /// dict[record index, envelope tuple (session_id, seq, event_id, time, type, data
    /// text, surface op 0/1/2, source_event_seqs, writer id, writer epoch,
    /// format_version, ignorable, turn_id, step_id, prev_event_id)] of each admitted
    /// record a Python unit reads, data opened when it was sealed
    #[pyo3(get)]
    envelopes: Py<PyAny>,
    /// list[(session id, partition, record indices)]: with `known_only`, the sessions
    /// this folder does not hold (not folded)
    #[pyo3(get)]
    unknown: Py<PyAny>,
}

/// The tenant and the Python callables the opener asks (see `set_opener`).
struct OpenerConfig {
    tenant: String,
    lookup: Py<PyAny>,
    placeholder: Py<PyAny>,
    /// The store's (epoch, now) (None: keys are asked again each batch).
    epoch: Option<Py<PyAny>>,
    cache: crypto::Cache,
    scratch: crypto::Scratch,
}

impl OpenerConfig {
    /// The batch's first look at the key store (under the GIL): its epoch and clock, so
    /// that keys kept from earlier batches are used only while they are still valid.
    fn begin(&mut self, py: Python<'_>) -> Result<(), crypto::Refuse> {
        if let Some(epoch) = &self.epoch {
            let (e, now): (i64, f64) = epoch.call0(py).and_then(|r| r.extract(py))
                .map_err(|_| crypto::Refuse)?;
            self.cache.begin(e, now);
        }
        self.cache.begun = true;
        Ok(())
    }

    /// Ask the key store (under the GIL) and keep the answer.
    fn ask(&mut self, py: Python<'_>, key_session: &str, data_class: &str)
           -> Result<crypto::KeyLookup, crypto::Refuse> {
        // (state, key) or (state, key, until): see set_opener
        let got: (String, Option<Vec<u8>>, Option<f64>) = self.lookup
            .call1(py, (key_session, data_class))
            .and_then(|r| {
                let r = r.bind(py);
                if r.len()? == 2 {
                    let (a, b): (String, Option<Vec<u8>>) = r.extract()?;
                    Ok((a, b, None))
                } else {
                    r.extract()
                }
            })
            .map_err(|_| crypto::Refuse)?;
        let found = match (got.0.as_str(), got.1) {
            ("active", Some(key)) => crypto::KeyLookup::Active(
                std::sync::Arc::new(crypto::cipher(&key).ok_or(crypto::Refuse)?)),
            ("shredded", _) => crypto::KeyLookup::Shredded,
            ("active", None) | ("missing", _) => crypto::KeyLookup::Missing,
            _ => return Err(crypto::Refuse),
        };
        let until = if matches!(found, crypto::KeyLookup::Missing) { f64::NEG_INFINITY }
                    else { got.2.unwrap_or(f64::NEG_INFINITY) };
        self.cache.put(key_session, crypto::class_index(data_class), found.clone(), until);
        Ok(found)
    }

    /// Every key the batch's sealed parts name and the cache cannot answer, asked in one
    /// hold of the GIL (the fold runs without it: one acquisition per batch, not per key).
    /// A failed ask is left to the fold's own lookup (which refuses the part).
    fn prefetch<'a>(&mut self, parts: impl Iterator<Item = (&'a str, &'a str)>) {
        // A set, not a Vec searched per part: before the batch's `begin` every part
        // counts, and a batch names up to (sessions x classes) keys (a linear search
        // per part was ~750 instructions an event in bench_encryption's profile).
        let mut seen: HashSet<(&str, &str)> = HashSet::new();
        let mut want: Vec<(&str, &str)> = Vec::new();
        for (ks, class) in parts {
            let ci = crypto::class_index(class);
            if (!self.cache.begun || self.cache.get(ks, ci).is_none())
                && seen.insert((ks, class)) {
                want.push((ks, class));
            }
        }
        if want.is_empty() {
            return;
        }
        Python::with_gil(|py| {
            if !self.cache.begun && self.begin(py).is_err() {
                return;
            }
            for (ks, class) in want {
                if self.cache.get(ks, crypto::class_index(class)).is_none() {
                    let _ = self.ask(py, ks, class);
                }
            }
        });
    }
}

/// The batch's keys: a cache over the Python key store's lookup (the fold runs without
/// the GIL: a miss takes it for the call).
struct PyKeys<'a> {
    cfg: &'a mut OpenerConfig,
}

impl crypto::Keys for PyKeys<'_> {
    fn lookup(&mut self, key_session: &str, data_class: &str)
              -> Result<crypto::KeyLookup, crypto::Refuse> {
        if self.cfg.cache.begun {
            if let Some(found) = self.cfg.cache.get(key_session, crypto::class_index(data_class)) {
                return Ok(found.clone());
            }
        }
        let cfg = &mut *self.cfg;
        Python::with_gil(|py| {
            if !cfg.cache.begun {
                cfg.begin(py)?;
                if let Some(found) = cfg.cache.get(key_session, crypto::class_index(data_class)) {
                    return Ok(found.clone());
                }
            }
            cfg.ask(py, key_session, data_class)
        })
    }

    fn placeholder(&mut self, event_type: &str, path: &str, text: &str)
                   -> Result<serde_json::Value, crypto::Refuse> {
        let tag: &'static str = if text == crypto::DELETED_TEXT { crypto::DELETED_TEXT }
                                else { crypto::UNAVAILABLE_TEXT };
        let k = (event_type.to_string(), path.to_string(), tag);
        if let Some(v) = self.cfg.cache.placeholders.get(&k) {
            return Ok(v.clone());
        }
        let placeholder = &self.cfg.placeholder;
        let got: String = Python::with_gil(|py| {
            placeholder.call1(py, (event_type, path, tag)).and_then(|r| r.extract(py))
        }).map_err(|_| crypto::Refuse)?;
        let v = json::parse_checked(&got).ok_or(crypto::Refuse)?;
        self.cfg.cache.placeholders.insert(k, v.clone());
        Ok(v)
    }
}

#[pymethods]
impl Folder {
    /// `fingerprints`: (8-byte CRC-64-AVRO fingerprint, schema version N of
    /// session_event.vN.avsc); `catalog`: the known event types; `python_types`: the
    /// types some Python unit reads; `versions`: state_version of each native unit.
    #[new]
    fn new(fingerprints: Vec<(Vec<u8>, u32)>, format_version: i64, catalog: Vec<String>,
           python_types: Vec<String>, versions: HashMap<String, i64>, window: i64) -> Folder {
        Folder {
            schemas: avro::Schemas::new(&fingerprints),
            format_version,
            catalog: catalog.into_iter().collect(),
            python_types: python_types.into_iter().collect(),
            versions,
            window,
            sessions: HashMap::new(),
            snapshots: HashMap::new(),
            opener: None,
            shapes: HashMap::new(),
            arena: Vec::new(),
        }
    }

    /// Open sealed content here: `tenant` binds the associated data; `lookup(key_session,
    /// data_class)` returns ("active", key) / ("shredded", None) / ("missing", None)
    /// from the key store, optionally with a third item: until when (the store's
    /// monotonic clock) the answer may be reused; `placeholder(type, path, text)` the
    /// canonical JSON text of the reference placeholder (cached). The keys a batch's
    /// parts name are asked together, in one hold of the GIL, before its fold. Without
    /// `epoch`, each key is asked once per batch. With it (`epoch()` -> (the store's
    /// epoch, its clock), called once per batch before its first lookup), an active or
    /// shredded key is kept across batches while the epoch stays the same and the clock
    /// is before its until; a missing one is asked again each batch. Without an opener,
    /// a session with sealed content is handed to the caller.
    #[pyo3(signature = (tenant, lookup, placeholder, epoch = None))]
    fn set_opener(&mut self, tenant: String, lookup: Py<PyAny>, placeholder: Py<PyAny>,
                  epoch: Option<Py<PyAny>>) {
        self.opener = Some(OpenerConfig { tenant, lookup, placeholder, epoch,
                                          cache: crypto::Cache::default(),
                                          scratch: crypto::Scratch::default() });
    }

    /// The schema layouts this build decodes natively (by the given fingerprints).
    #[getter]
    fn layouts(&self) -> usize {
        self.schemas.layouts()
    }

    /// Fold one batch. `records`: objects with `partition`, `offset`, `key`, `value`;
    /// `progress`: partition -> last offset already in the sink (skipped).
    /// `python_owned`: sessions the caller folds itself (left alone here).
    /// Returns a `FoldOut` (its fields say what each holds). With `known_only` (the live
    /// worker), a session this folder does not hold yet is not folded: it comes back in
    /// `FoldOut.unknown` for the caller to `start` or `load` from its stored row, and
    /// fold those records again.
    #[pyo3(signature = (records, progress, python_owned, known_only = false))]
    fn fold(
        &mut self,
        py: Python<'_>,
        records: &Bound<'_, PyList>,
        progress: HashMap<i64, i64>,
        python_owned: HashSet<String>,
        known_only: bool,
    ) -> PyResult<FoldOut> {
        // Under the GIL: each record's partition, offset, key and value, copied out (owned
        // bytes). The decode and the fold run without it (another thread, e.g. replay's
        // consumer, runs meanwhile); the envelopes for the Python units are built after.
        let s_partition = pyo3::intern!(py, "partition");
        let s_offset = pyo3::intern!(py, "offset");
        let s_key = pyo3::intern!(py, "key");
        let s_value = pyo3::intern!(py, "value");
        // one buffer for the batch's bytes, kept between batches: no allocation per record
        let mut arena = std::mem::take(&mut self.arena);
        arena.clear();
        let mut copy = |b: &[u8]| {
            arena.extend_from_slice(b);
            (arena.len() - b.len(), arena.len())
        };
        let mut raw = Vec::with_capacity(records.len());
        for rec in records.iter() {
            let partition: i64 = field(&rec, s_partition)?.extract::<Option<i64>>()?.unwrap_or(0);
            let offset: i64 = field(&rec, s_offset)?.extract::<Option<i64>>()?.unwrap_or(0);
            if offset <= *progress.get(&partition).unwrap_or(&-1) {
                raw.push(Raw { partition, offset, key: RawKey::Absent, value: None });
                continue; // skipped: neither read nor copied
            }
            let value = field(&rec, s_value)?;
            let value = value.downcast::<PyBytes>().ok().map(|v| copy(v.as_bytes()));
            let key = field(&rec, s_key)?;
            let key = if key.is_none() { RawKey::Absent } else {
                match key.downcast::<PyBytes>() {
                    Ok(k) => {
                        let (a, b) = copy(k.as_bytes());
                        RawKey::Bytes(a, b)
                    }
                    Err(_) => RawKey::Other,
                }
            };
            raw.push(Raw { partition, offset, key, value });
        }
        let (dead, native, handed, high, skipped, envelopes, unknown) = py.allow_threads(
            || self.fold_owned(&raw, &arena, &progress, &python_owned, known_only));
        self.arena = arena;
        let opened = PyDict::new(py);
        for (idx, env) in envelopes {
            opened.set_item(idx, env.to_py(py)?)?;
        }
        let list = |v: Bound<'_, PyAny>| v.unbind();
        Ok(FoldOut {
            dead: list(dead.into_pyobject(py)?.into_any()),
            native: list(native.into_pyobject(py)?.into_any()),
            handed: list(handed.into_pyobject(py)?.into_any()),
            high: list(high.into_pyobject(py)?.into_any()),
            skipped,
            envelopes: opened.into_any().unbind(),
            unknown: list(unknown.into_pyobject(py)?.into_any()),
        })
    }

    /// Undo this batch's fold of `session_id` (a Python unit failed on one of its
    /// events): back to its state before the last `fold`, to be handed to the caller.
    fn restore(&mut self, session_id: &str) {
        if let Some(before) = self.snapshots.remove(session_id) {
            self.undo(session_id, before);
        }
    }

    /// Whether the session is folded here (it has been since its first record).
    fn has(&self, session_id: &str) -> bool {
        self.sessions.contains_key(session_id)
    }

    /// The session's fields as the sink stores them: view:/state:/sv: of every native
    /// unit (or, with `changed_only`, of those changed since the last call), admission,
    /// meta, as_of_seq, as_of_offset; plus the native unit keys that changed.
    fn fields<'py>(&mut self, py: Python<'py>, session_id: &str, changed_only: bool)
                   -> PyResult<Option<(Bound<'py, PyDict>, Vec<&'static str>)>> {
        Ok(self.fields_of(py, session_id, changed_only, 0)?.map(|(d, c, _)| (d, c)))
    }

    /// `fields`, with the chunked units (turns, tools, todo, compaction: ADR 0013) as
    /// their heads under view:/state: plus their parts: (unit key, collection, items,
    /// first item given, the item texts from it), from the chunk of `chunk` items that
    /// holds the first item not written by the previous call (all after `rewrite`).
    #[allow(clippy::type_complexity)]
    fn chunked_fields<'py>(&mut self, py: Python<'py>, session_id: &str, changed_only: bool,
                           chunk: usize) -> PyResult<Option<FieldsOut<'py>>> {
        self.fields_of(py, session_id, changed_only, chunk.max(1))
    }

    /// The native chunked units' collections, per unit key: (name, kind, view key,
    /// state key), as the Python units declare them (for `write_fields`).
    #[allow(clippy::type_complexity)]
    fn set_chunk_shapes(&mut self,
                        shapes: HashMap<String, Vec<(String, String, Option<String>,
                                                     Option<String>)>>) {
        self.shapes = shapes.into_iter().map(|(k, v)| (k, v.into_iter()
            .map(|(name, kind, view_key, state_key)| rowwrite::Shape {
                name, kind, view_key, state_key }).collect())).collect();
    }

    /// `chunked_fields` with each chunked unit's chunk fields and manifest built here
    /// (streams.native_fold.native_chunks in Python): (fields, native units changed,
    /// chunk fields to delete, per chunked unit written (chunk, chunks per collection)).
    /// `stored`: per unit what the row holds (empty: a first write).
    #[allow(clippy::type_complexity)]
    fn write_fields<'py>(&mut self, py: Python<'py>, session_id: &str, changed_only: bool,
                         chunk: usize, stored: HashMap<String, rowwrite::Stored>)
                         -> PyResult<Option<(Bound<'py, PyDict>, Vec<&'static str>,
                                             Vec<String>,
                                             HashMap<&'static str, (usize, HashMap<String, usize>)>)>> {
        let chunk = chunk.max(1);
        let Some((d, changed, parts)) = self.fields_of(py, session_id, changed_only, chunk)?
            else { return Ok(None) };
        let mut by_unit: Vec<(&'static str, Vec<(&str, usize, usize, &[String])>)> = Vec::new();
        for (key, c, n, at, texts) in &parts {
            match by_unit.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => v.push((c, *n, *at, texts.as_slice())),
                None => by_unit.push((key, vec![(c, *n, *at, texts.as_slice())])),
            }
        }
        let mut fields = Vec::new();
        let mut deletes = Vec::new();
        let mut counts = HashMap::new();
        for (key, unit_parts) in &by_unit {
            let shapes = self.shapes.get(*key).ok_or_else(|| {
                pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "native fold: no chunk shapes for {key} (set_chunk_shapes)"))
            })?;
            let got = rowwrite::unit_chunks(key, shapes, unit_parts, stored.get(*key), chunk,
                                            &mut fields, &mut deletes)
                .map_err(pyo3::exceptions::PyAssertionError::new_err)?;
            counts.insert(*key, (chunk, got));
        }
        for (k, v) in fields {
            d.set_item(k, v)?;
        }
        d.del_item(layout::AS_OF_SEQ)?;
        d.del_item(layout::AS_OF_OFFSET)?;
        Ok(Some((d, changed, deletes, counts)))
    }

    /// The next chunked_fields of the session gives every item (its last write did not
    /// apply).
    fn rewrite(&mut self, session_id: &str) {
        if let Some(s) = self.sessions.get_mut(session_id) {
            s.marks = chunks::Marks::default();
            s.more.todo.dirty_from = 0;
            s.surface.dirty_from = 0;
        }
    }


    /// (as_of_seq, as_of_offset, last_time, partition) of a natively folded session.
    fn position(&self, session_id: &str) -> Option<(i64, i64, Option<i64>, i64)> {
        self.sessions.get(session_id)
            .map(|s| (s.as_of_seq, s.as_of_offset, s.last_time, s.partition))
    }

    /// Hand a session to the caller: its fields (all units) and the native units changed
    /// since its last write; it is forgotten here.
    #[allow(clippy::type_complexity)]
    fn export<'py>(&mut self, py: Python<'py>, session_id: &str)
                   -> PyResult<Option<(Bound<'py, PyDict>, Vec<&'static str>)>> {
        let out = self.fields(py, session_id, false)?;
        self.sessions.remove(session_id);
        self.snapshots.remove(session_id);
        Ok(out)
    }

    fn forget(&mut self) {
        self.sessions.clear();
        self.snapshots.clear();
    }

    /// The admission verdicts other than `admitted` of the session's records in the last
    /// `fold` (the worker's rejection metrics).
    fn verdicts(&self, session_id: &str) -> HashMap<String, i64> {
        self.sessions.get(session_id)
            .map(|s| s.verdicts.iter().map(|(k, v)| (k.to_string(), *v)).collect())
            .unwrap_or_default()
    }

    /// Forget the sessions of these partitions (moved away on a rebalance); their ids.
    fn forget_partitions(&mut self, partitions: HashSet<i64>) -> Vec<String> {
        let gone: Vec<String> = self.sessions.iter()
            .filter(|(_, s)| partitions.contains(&s.partition))
            .map(|(k, _)| k.clone()).collect();
        for k in &gone {
            self.sessions.remove(k);
            self.snapshots.remove(k);
        }
        gone
    }

    /// Forget one session (handed to the Python processor, which reloads it).
    fn drop_session(&mut self, session_id: &str) -> bool {
        self.snapshots.remove(session_id);
        self.sessions.remove(session_id).is_some()
    }

    /// Start folding a session that has no stored row.
    fn start(&mut self, session_id: &str, partition: i64) {
        let window = self.window;
        self.snapshots.remove(session_id); // a checkpoint of what it replaces is void
        self.sessions.insert(session_id.to_string(),
                             Box::new(Sess::new(session_id, partition, window)));
    }

    /// Continue a session from its stored row (`fields`: view:/state:/sv: of the native
    /// units with content fields already opened, admission, meta). True when loaded:
    /// every state, the admission and the meta re-dump to exactly the stored texts and
    /// every state_version is this build's; else nothing is kept and the caller's
    /// Python processor folds the session. `seed`: the seed length the Python opener
    /// learnt for it (None: not seen; the associated data alone binds inherited parts).
    #[pyo3(signature = (session_id, fields, seed = None))]
    fn load(&mut self, session_id: &str, fields: HashMap<String, String>, seed: Option<i64>)
            -> bool {
        match self.load_row(session_id, &fields) {
            Some(mut s) => {
                s.seed = seed;
                self.snapshots.remove(session_id);
                self.sessions.insert(session_id.to_string(), Box::new(s));
                true
            }
            None => false,
        }
    }

    /// The sessions the records' keys name that this folder does not hold and the
    /// caller does not fold itself (`python_owned`), with the partition of the first
    /// record of each, in order: the live worker loads them before `fold` (one
    /// decode per record instead of a second fold of a new session's records). Only
    /// the keys are read; a record without a key, or whose key is not UTF-8, is left
    /// to `fold`.
    fn unknown_sessions(&self, py: Python<'_>, records: &Bound<'_, PyList>,
                        python_owned: HashSet<String>) -> PyResult<Vec<(String, i64)>> {
        self.first_records_of_unknown(py, records, &python_owned, |_, partition, _| {
            Ok(partition)
        })
    }

    /// `unknown_sessions`, each with whether its row cannot hold anything yet as far as
    /// this batch shows: the session's first record here (its lowest offset: a session
    /// lives in one partition) is past `progress` and decodes as the session's first
    /// event (seq 0, the key's session). The live worker starts those without loading
    /// their row; the sink's compare-and-set (base offset -1) still refuses the write
    /// if a row exists after all, and the session is then folded from the stored row.
    fn new_sessions(&self, py: Python<'_>, records: &Bound<'_, PyList>,
                    python_owned: HashSet<String>, progress: HashMap<i64, i64>)
                    -> PyResult<Vec<(String, i64, bool)>> {
        let s_offset = pyo3::intern!(py, "offset");
        let s_value = pyo3::intern!(py, "value");
        let found = self.first_records_of_unknown(py, records, &python_owned,
                                                  |rec, partition, sid| {
            let offset: i64 = field(rec, s_offset)?.extract::<Option<i64>>()?.unwrap_or(0);
            let mut fresh = false;
            if offset > *progress.get(&partition).unwrap_or(&-1) {
                let value = field(rec, s_value)?;
                if let Ok(v) = value.downcast::<PyBytes>() {
                    if let Some(env) = self.schemas.decode(v.as_bytes()) {
                        fresh = env.seq == 0 && env.session_id == sid;
                    }
                }
            }
            Ok((partition, fresh))
        })?;
        Ok(found.into_iter().map(|(sid, (partition, fresh))| (sid, partition, fresh)).collect())
    }

    #[getter]
    fn sessions(&self) -> usize {
        self.sessions.len()
    }
}

/// A session's fields, its native units changed, and its chunked parts (see chunked_fields).
type FieldsOut<'py> = (Bound<'py, PyDict>, Vec<&'static str>,
                       Vec<(&'static str, &'static str, usize, usize, Vec<String>)>);

impl Folder {
    /// The first record of each session the records' keys name that this folder does
    /// not hold and `python_owned` does not name, in order, with what `each` makes of
    /// it (given the record, its partition and the session id). A record without a key,
    /// or whose key is not UTF-8, is skipped (left to `fold`).
    fn first_records_of_unknown<T>(
        &self, py: Python<'_>, records: &Bound<'_, PyList>, python_owned: &HashSet<String>,
        mut each: impl FnMut(&Bound<'_, PyAny>, i64, &str) -> PyResult<T>,
    ) -> PyResult<Vec<(String, T)>> {
        let s_partition = pyo3::intern!(py, "partition");
        let s_key = pyo3::intern!(py, "key");
        let mut seen: HashSet<Vec<u8>> = HashSet::new();
        let mut out = Vec::new();
        for rec in records.iter() {
            let key = field(&rec, s_key)?;
            let Ok(key) = key.downcast::<PyBytes>() else { continue };
            let raw = key.as_bytes();
            if seen.contains(raw) {
                continue;
            }
            seen.insert(raw.to_vec());
            let Ok(sid) = std::str::from_utf8(raw) else { continue };
            if self.sessions.contains_key(sid) || python_owned.contains(sid) {
                continue;
            }
            let partition: i64 = field(&rec, s_partition)?.extract::<Option<i64>>()?.unwrap_or(0);
            let made = each(&rec, partition, sid)?;
            out.push((sid.to_string(), made));
        }
        Ok(out)
    }

    /// `fold` over the records' owned bytes, without the GIL (the opener's key lookups
    /// take it on a cache miss); the Python units' envelopes come back as `Envelope`s.
    #[allow(clippy::type_complexity)]
    fn fold_owned<'r>(&mut self, records: &[Raw], arena: &'r [u8],
                      progress: &HashMap<i64, i64>,
                  python_owned: &HashSet<String>, known_only: bool)
                  -> (Vec<usize>, Vec<(String, i64, Vec<usize>)>, Vec<(String, Vec<usize>)>,
                      HashMap<i64, i64>, usize, Vec<(usize, Envelope)>,
                      Vec<(String, i64, Vec<usize>)>) {
        self.settle();
        if let Some(o) = self.opener.as_mut() {
            o.cache.next_batch(); // held keys are checked against the store's epoch again
        }
        let mut opened_text: Vec<(usize, Envelope)> = Vec::new();
        let mut dead = Vec::new();
        let mut high: HashMap<i64, i64> = HashMap::new();
        let mut order: Vec<String> = Vec::new();
        let mut groups: HashMap<String, (i64, Vec<Item<'r>>)> = HashMap::new();
        let mut skipped = 0usize;
        for (idx, rec) in records.iter().enumerate() {
            let (partition, offset) = (rec.partition, rec.offset);
            let h = high.entry(partition).or_insert(-1);
            if offset > *h {
                *h = offset;
            }
            if offset <= *progress.get(&partition).unwrap_or(&-1) {
                skipped += 1;
                continue;
            }
            let Some(bytes) = rec.value.map(|(a, b)| &arena[a..b]) else {
                dead.push(idx);
                continue;
            };
            let Some(env) = self.schemas.decode(bytes) else {
                dead.push(idx);
                continue;
            };
            match &rec.key {
                RawKey::Absent => {}
                RawKey::Bytes(a, b) if &arena[*a..*b] == env.session_id.as_bytes() => {}
                _ => {
                    dead.push(idx);
                    continue;
                }
            }
            if env.format_version < 1 {
                dead.push(idx);
                continue;
            }
            let data = if env.format_version > self.format_version {
                serde_json::Value::Null // quarantined by the caller: data never read
            } else {
                match json::parse_checked(env.data) {
                    Some(v) => v,
                    None => {
                        dead.push(idx);
                        continue;
                    }
                }
            };
            let ev = Ev {
                session_id: env.session_id.to_string(),
                seq: env.seq,
                event_id: env.event_id.to_string(),
                time: env.time,
                etype: env.etype.to_string(),
                data,
                writer_id: env.writer_id.to_string(),
                writer_epoch: env.writer_epoch,
                ignorable: env.ignorable,
                turn_id: env.turn_id.map(str::to_string),
                step_id: env.step_id.map(str::to_string),
                format_version: env.format_version,
                prev_event_id: env.prev_event_id.map(str::to_string),
                surface_op: env.surface_op,
                py: if self.python_types.contains(env.etype) {
                    Some(Box::new(units::PyParts {
                        // sealed: the opened data's text replaces it (see below)
                        text: if env.sealed.is_empty() { env.data.to_string() }
                              else { String::new() },
                    }))
                } else {
                    None
                },
                source_event_seqs: env.source_event_seqs,
            };
            let g = groups.entry(ev.session_id.clone()).or_insert_with(|| {
                order.push(ev.session_id.clone());
                (partition, Vec::new())
            });
            g.1.push(Item { idx, offset, ev, sealed: env.sealed });
        }
        if let Some(cfg) = self.opener.as_mut() {
            cfg.prefetch(groups.values().flat_map(|(_, items)| items.iter())
                .flat_map(|it| it.sealed.iter()).map(|p| (p.key_session, p.data_class)));
        }
        let mut native = Vec::new();
        let mut handed = Vec::new();
        let mut unknown = Vec::new();
        for sid in order {
            let (partition, mut items) = groups.remove(&sid).unwrap_or((0, Vec::new()));
            if python_owned.contains(&sid)
                || !items.iter().all(|it| self.foldable(&it.ev, !it.sealed.is_empty())) {
                handed.push((sid, items.iter().map(|it| it.idx).collect()));
                continue;
            }
            if known_only && !self.sessions.contains_key(&sid) {
                unknown.push((sid, partition, items.iter().map(|it| it.idx).collect()));
                continue;
            }
            let window = self.window;
            let before = self.sessions.get_mut(&sid).map(|s| undo::Checkpoint::take(s));
            let sess = self.sessions.entry(sid.clone())
                .or_insert_with(|| Box::new(Sess::new(&sid, partition, window)));
            let mut py_idx = Vec::new();
            let mut touched = false;
            let mut aborted = false;
            let mut batch_opened: Vec<(usize, Envelope)> = Vec::new();
            sess.verdicts.clear();
            for it in items.iter_mut() {
                if it.offset <= sess.as_of_offset {
                    skipped += 1;
                    continue;
                }
                touched = true;
                sess.as_of_offset = it.offset;
                let ev = &it.ev;
                match sess.adm.admit(&ev.event_id, ev.seq, &ev.writer_id, ev.writer_epoch,
                                     ev.prev_event_id.as_deref()) {
                    Verdict::Duplicate => {
                        sess.count("duplicate");
                        *sess.verdicts.entry("duplicate").or_insert(0) += 1;
                        continue;
                    }
                    Verdict::Rejected(code, reason) => {
                        sess.count(code);
                        *sess.verdicts.entry(code).or_insert(0) += 1;
                        sess.rejections.record(code, &reason, ev, &sess.adm, it.offset);
                        sess.changed |= REJECTIONS;
                        continue;
                    }
                    Verdict::Admitted => sess.count("admitted"),
                }
                if ev.seq == 0 && sess.first_offset.is_none() {
                    sess.first_offset = Some(it.offset);
                }
                sess.last_time = Some(ev.time);
                if !self.catalog.contains(&ev.etype) {
                    sess.count("ignored"); // foldable() checked it is ignorable
                    sess.as_of_seq = ev.seq;
                    continue;
                }
                if ev.etype == "session/start" {
                    sess.seed = Some(seed_length(&ev.data));
                }
                if !it.sealed.is_empty() {
                    // stage 4 (open), after admission and readability as in the pipeline
                    let Some(cfg) = self.opener.as_mut() else {
                        aborted = true;
                        break;
                    };
                    let tenant = std::mem::take(&mut cfg.tenant);
                    let mut scratch = std::mem::take(&mut cfg.scratch);
                    let opener = crypto::Opener { tenant: &tenant, session_id: &sid,
                                                  seed_length: sess.seed };
                    let mut keys = PyKeys { cfg };
                    let data = std::mem::take(&mut it.ev.data);
                    let opened = opener.open(&mut keys, it.ev.seq, &it.ev.event_id,
                                             &it.ev.etype, data, &it.sealed, &mut scratch);
                    cfg.tenant = tenant;
                    cfg.scratch = scratch;
                    match opened {
                        Ok(o) => {
                            it.ev.data = o.data;
                            it.sealed.clear();
                        }
                        Err(_) => {
                            aborted = true; // the Python opener gives the verdict
                            break;
                        }
                    }
                    if !prescan(&it.ev) {
                        aborted = true;
                        break;
                    }
                    if let Some(p) = it.ev.py.as_mut() {
                        p.text = json::dumps(&it.ev.data); // the opened data, canonical
                    }
                }
                let ev = &it.ev;
                sess.index.apply(ev);
                sess.changed |= INDEX;
                let t = ev.etype.as_str();
                let bit = match t {
                    "turn/start" | "turn/end" | "step/start" | "step/end" => {
                        if sess.turns.apply(ev) { TURNS } else { 0 }
                    }
                    "request/header" | "assistant/message" => {
                        if sess.usage.apply(ev) { USAGE } else { 0 }
                    }
                    "plan/set" => {
                        if sess.plan.apply(ev) { PLAN } else { 0 }
                    }
                    "goal/set" => {
                        if sess.goal.apply(ev) { GOAL } else { 0 }
                    }
                    _ => 0,
                };
                sess.changed |= bit | sess.more.apply(ev);
                match sess.surface.apply(ev) {
                    Ok(true) => sess.changed |= SURFACE,
                    Ok(false) => {}
                    Err(surface::Refuse) => {
                        aborted = true; // the Python unit raises (or folds otherwise)
                        break;
                    }
                }
                if self.python_types.contains(t) {
                    py_idx.push(it.idx);
                    batch_opened.push((it.idx, Envelope::of(ev)));
                }
                sess.as_of_seq = ev.seq;
            }
            if aborted {
                self.undo(&sid, before);
                handed.push((sid, items.iter().map(|it| it.idx).collect()));
                continue;
            }
            opened_text.extend(batch_opened);
            if touched {
                self.snapshots.insert(sid.clone(), before);
                native.push((sid, partition, py_idx));
            } else if let Some(s) = self.sessions.get_mut(&sid) {
                undo::Checkpoint::settle(s); // nothing folded: nothing to undo
            }
        }
        (dead, native, handed, high, skipped, opened_text, unknown)
    }


    /// Put a session back as it was before this batch's fold (`before` None: it was new).
    fn undo(&mut self, sid: &str, before: Option<undo::Checkpoint>) {
        match (before, self.sessions.get_mut(sid)) {
            (Some(cp), Some(s)) => cp.restore(s),
            _ => {
                self.sessions.remove(sid);
            }
        }
    }

    /// The last fold can no longer be undone (a new batch starts).
    fn settle(&mut self) {
        for (sid, _) in self.snapshots.drain() {
            if let Some(s) = self.sessions.get_mut(&sid) {
                undo::Checkpoint::settle(s);
            }
        }
    }

    fn load_row(&self, sid: &str, f: &HashMap<String, String>) -> Option<Sess> {
        let get = |k: &str| f.get(k).map(String::as_str);
        for key in NATIVE_UNITS {
            let want = self.versions.get(key).copied().unwrap_or(1).to_string();
            if get(&format!("{}{key}", layout::STATE_VERSION))? != want {
                return None; // stale: the Python processor rebuilds it from the log
            }
        }
        let state = |k: &str| get(&format!("{}{k}", layout::STATE));
        let adm = load::admission(get(layout::ADMISSION)?, sid)?;
        let meta = load::meta(get(layout::META)?, sid)?;
        let mut s = Sess::new(sid, meta.partition, self.window);
        s.adm = adm;
        s.as_of_seq = meta.as_of_seq;
        s.as_of_offset = meta.as_of_offset;
        s.first_offset = meta.first_offset;
        s.last_time = meta.last_time;
        s.counts = meta.counts;
        s.index = load::index(state("index")?)?;
        s.turns = load::turns(state("turns")?)?;
        s.usage = load::usage(state("usage")?)?;
        s.plan = load::plan(state("plan")?)?;
        s.goal = load::goal(state("goal")?)?;
        s.rejections = load::rejections(state("rejections")?)?;
        s.more = load::more(|k| state(k).map(str::to_string))?;
        s.surface = surface::Surface::load(state("surface")?)?;
        if s.adm.text() != get(layout::ADMISSION)? || s.meta() != get(layout::META)? {
            return None;
        }
        // every unit's view and state must come out exactly as stored
        for (bit, key) in BITS {
            let (view, dump) = s.encode(bit);
            if get(&format!("{}{key}", layout::VIEW))? != view || state(key)? != dump {
                return None;
            }
        }
        Some(s)
    }

    fn fields_of<'py>(&mut self, py: Python<'py>, session_id: &str, changed_only: bool,
                      chunk: usize) -> PyResult<Option<FieldsOut<'py>>> {
        let Some(s) = self.sessions.get_mut(session_id) else { return Ok(None) };
        let d = PyDict::new(py);
        let mask = if changed_only { s.changed } else { 0xffff };
        let mut changed = Vec::new();
        let mut parts = Vec::new();
        for (bit, key) in [(INDEX, "index"), (TURNS, "turns"), (USAGE, "usage"), (PLAN, "plan"),
                           (GOAL, "goal"), (REJECTIONS, "rejections")]
                           .into_iter().chain(units_more::KEYS)
                           .chain([(SURFACE, "surface")]) {
            if s.changed & bit != 0 {
                changed.push(key);
            }
            if mask & bit == 0 {
                continue;
            }
            let chunked = if chunk == 0 { None } else {
                match bit {
                    TURNS => Some(chunks::turns(&s.turns, &mut s.marks, chunk)),
                    units_more::TOOLS => Some(chunks::tools(&s.more.tools, &mut s.marks, chunk)),
                    units_more::TODO => Some(chunks::todo(&mut s.more.todo, chunk)),
                    units_more::COMPACTION => {
                        Some(chunks::compaction(&s.more.compaction, &mut s.marks, chunk))
                    }
                    SURFACE => Some(s.surface.chunked(chunk)),
                    _ => None,
                }
            };
            let (view, state) = match (bit, chunked) {
                (_, Some((view, state, ps))) => {
                    parts.extend(ps.into_iter().map(|(c, n, at, texts)| (key, c, n, at, texts)));
                    (view, state)
                }
                (INDEX, _) => {
                    let t = s.index.text();
                    (t.clone(), t)
                }
                (TURNS, _) => (s.turns.view(), s.turns.dump()),
                (USAGE, _) => (s.usage.view(), s.usage.dump()),
                (PLAN, _) => {
                    let t = s.plan.text();
                    (t.clone(), t)
                }
                (GOAL, _) => (s.goal.view(), s.goal.dump()),
                (REJECTIONS, _) => {
                    let t = s.rejections.text();
                    (t.clone(), t)
                }
                (SURFACE, _) => (s.surface.view(), s.surface.dump()),
                (_, None) => s.more.encode(bit).unwrap_or_default(),
            };
            d.set_item(format!("{}{key}", layout::VIEW), view)?;
            d.set_item(format!("{}{key}", layout::STATE), state)?;
            d.set_item(format!("{}{key}", layout::STATE_VERSION), self.versions.get(key).copied().unwrap_or(1).to_string())?;
        }
        d.set_item(layout::ADMISSION, s.adm.text())?;
        d.set_item(layout::META, s.meta())?;
        d.set_item(layout::AS_OF_SEQ, s.as_of_seq.to_string())?;
        d.set_item(layout::AS_OF_OFFSET, s.as_of_offset.to_string())?;
        s.changed = 0;
        Ok(Some((d, changed, parts)))
    }

    fn foldable(&self, ev: &Ev, sealed: bool) -> bool {
        if ev.format_version > self.format_version {
            return false; // quarantine: the Python reference does it
        }
        if ev.etype == SHRED_TYPE {
            // a deletion: the Python processor drops what it folded and refolds the
            // session from the log, where the shredded content reads as placeholders
            return false;
        }
        if !self.catalog.contains(&ev.etype) && !ev.ignorable {
            return false; // unknown required type: quarantine
        }
        // sealed data holds placeholders: its shapes are checked once it is opened
        sealed || prescan(ev)
    }
}

/// Whether every native unit folds `ev` exactly as its Python unit would.
fn prescan(ev: &Ev) -> bool {
    units::prescan(ev) && units_more::prescan(ev) && surface::prescan(ev)
}

/// One record as `Folder.fold` read it under the GIL: its bytes copied into the batch's
/// buffer (`Folder.arena`), as (start, end).
struct Raw {
    partition: i64,
    offset: i64,
    key: RawKey,
    /// None: the value is not bytes (a dead letter).
    value: Option<(usize, usize)>,
}

/// A record's key: none, its bytes in the buffer, or something else (a dead letter).
enum RawKey {
    Absent,
    Bytes(usize, usize),
    Other,
}

/// The envelope of an event a Python unit reads, as `Folder.fold` documents it, taken
/// out of the fold without the GIL (made a Python tuple after).
struct Envelope {
    session_id: String,
    seq: i64,
    event_id: String,
    time: i64,
    etype: String,
    text: String,
    surface_op: u8,
    source_event_seqs: Vec<i64>,
    writer_id: String,
    writer_epoch: i64,
    format_version: i64,
    ignorable: bool,
    turn_id: Option<String>,
    step_id: Option<String>,
    prev_event_id: Option<String>,
}

impl Envelope {
    fn of(ev: &Ev) -> Envelope {
        let p = ev.py.as_ref().expect("python_types events keep their PyParts");
        Envelope {
            session_id: ev.session_id.clone(),
            seq: ev.seq,
            event_id: ev.event_id.clone(),
            time: ev.time,
            etype: ev.etype.clone(),
            text: p.text.clone(),
            surface_op: ev.surface_op,
            source_event_seqs: ev.source_event_seqs.clone(),
            writer_id: ev.writer_id.clone(),
            writer_epoch: ev.writer_epoch,
            format_version: ev.format_version,
            ignorable: ev.ignorable,
            turn_id: ev.turn_id.clone(),
            step_id: ev.step_id.clone(),
            prev_event_id: ev.prev_event_id.clone(),
        }
    }

    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyTuple>> {
        let t = PyTuple::new(py, [
            self.session_id.as_str().into_pyobject(py)?.into_any(),
            self.seq.into_pyobject(py)?.into_any(),
            self.event_id.as_str().into_pyobject(py)?.into_any(),
            self.time.into_pyobject(py)?.into_any(),
            self.etype.as_str().into_pyobject(py)?.into_any(),
            self.text.as_str().into_pyobject(py)?.into_any(),
            self.surface_op.into_pyobject(py)?.into_any(),
            PyTuple::new(py, &self.source_event_seqs)?.into_any(),
            self.writer_id.as_str().into_pyobject(py)?.into_any(),
            self.writer_epoch.into_pyobject(py)?.into_any(),
            self.format_version.into_pyobject(py)?.into_any(),
            pyo3::types::PyBool::new(py, self.ignorable).to_owned().into_any(),
            self.turn_id.as_deref().into_pyobject(py)?.into_any(),
            self.step_id.as_deref().into_pyobject(py)?.into_any(),
            self.prev_event_id.as_deref().into_pyobject(py)?.into_any(),
        ])?;
        Ok(t.unbind())
    }
}

/// The unit keys folded natively.
/// A record's attribute, or a confluent-kafka `Message`'s accessor of that name called
/// (the live worker hands its messages over without a `Record` each).
fn field<'py>(rec: &Bound<'py, PyAny>, name: &Bound<'py, pyo3::types::PyString>)
              -> PyResult<Bound<'py, PyAny>> {
    let v = rec.getattr(name)?;
    if v.is_callable() { v.call0() } else { Ok(v) }
}

#[pyfunction]
fn native_units() -> Vec<&'static str> {
    NATIVE_UNITS.to_vec()
}

#[pymodule]
#[pyo3(name = "_native")]
fn sessionstream_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Folder>()?;
    m.add_class::<FoldOut>()?;
    m.add_class::<decode::Decoder>()?;
    m.add_class::<append::Appender>()?;
    m.add_class::<append::ManyAppended>()?;
    m.add_function(wrap_pyfunction!(native_units, m)?)?;
    m.add_function(wrap_pyfunction!(rowseal::seal_row, m)?)?;
    m.add_function(wrap_pyfunction!(rowseal::seal_row_digested, m)?)?;
    m.add_function(wrap_pyfunction!(rowseal::open_row, m)?)?;
    m.add_function(wrap_pyfunction!(resp::pack_session_writes, m)?)?;
    m.add_function(wrap_pyfunction!(messages::scan_messages, m)?)?;
    Ok(())
}
