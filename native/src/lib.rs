//! sessionstream_native: the fold of the projection processor, per batch, in Rust.
//!
//! Bytes in, text out: `Folder.fold(records, progress)` takes one poll's records (the
//! Kafka values as they came), decodes each Avro single-object record by its schema
//! fingerprint, applies the admission rule per session and folds the built-in units
//! it implements (all built-in units but the surface: index, turns, usage, plan, goal,
//! rejections in units.rs; tools, todo, business, compaction in units_more.rs); `Folder.fields(sid)`
//! hands back the session's Redis fields (view/state texts, admission, meta). No
//! Python object is made per event, except for events whose type a Python unit reads
//! (their record indices are returned, so the caller decodes just those).
//!
//! What it does not handle it hands back to the caller, which folds it with the
//! Python reference (the same results by construction): records it cannot decode
//! (unknown fingerprint, corrupt, key mismatch: the caller dead-letters them with the
//! Python codec's message), and sessions whose events it cannot fold exactly
//! (a quarantine, data of an unexpected shape): `Folder.export(sid)` gives their state
//! as the same fields, from which the Python processor loads a cursor.

mod avro;
mod chunks;
mod json;
mod units;
mod units_more;

use std::collections::{BTreeMap, HashMap, HashSet};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::units::{Admission, Ev, Goal, Index, Plan, Rejections, Turns, Usage, Verdict};
use crate::units_more::More;

pub const NATIVE_UNITS: [&str; 10] = ["index", "turns", "usage", "plan", "goal", "rejections",
                                      "tools", "todo", "business", "compaction"];
const INDEX: u16 = 1;
const TURNS: u16 = 2;
const USAGE: u16 = 4;
const PLAN: u16 = 8;
const GOAL: u16 = 16;
const REJECTIONS: u16 = 32;

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
    marks: chunks::Marks,
    changed: u16,
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
            marks: chunks::Marks::default(),
            changed: 0,
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

/// One record of the batch, decoded.
struct Item {
    idx: usize,
    offset: i64,
    ev: Ev,
}

#[pyclass]
pub struct Folder {
    schemas: avro::Schemas,
    format_version: i64,
    catalog: HashSet<String>,
    python_types: HashSet<String>,
    versions: HashMap<String, i64>,
    window: i64,
    sessions: HashMap<String, Sess>,
    snapshots: HashMap<String, Option<Sess>>,
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
        }
    }

    /// The schema layouts this build decodes natively (by the given fingerprints).
    #[getter]
    fn layouts(&self) -> usize {
        self.schemas.layouts()
    }

    /// Fold one batch. `records`: objects with `partition`, `offset`, `key`, `value`;
    /// `progress`: partition -> last offset already in the sink (skipped).
    /// `python_owned`: sessions the caller folds itself (left alone here).
    /// Returns (python_decode, sessions, python_sessions, high, skipped):
    /// record indices the caller must decode (dead letters); per natively folded
    /// session (session id, indices of its admitted records a Python unit reads);
    /// per session handed to the caller (session id, indices of its records); the
    /// highest offset per partition; records skipped by progress or as_of_offset.
    #[allow(clippy::type_complexity)]
    fn fold(
        &mut self,
        py: Python<'_>,
        records: &Bound<'_, PyList>,
        progress: HashMap<i64, i64>,
        python_owned: HashSet<String>,
    ) -> PyResult<(Vec<usize>, Vec<(String, i64, Vec<usize>)>, Vec<(String, Vec<usize>)>,
                   HashMap<i64, i64>, usize)> {
        self.snapshots.clear();
        let mut dead = Vec::new();
        let mut high: HashMap<i64, i64> = HashMap::new();
        let mut order: Vec<String> = Vec::new();
        let mut groups: HashMap<String, (i64, Vec<Item>)> = HashMap::new();
        let mut skipped = 0usize;
        let s_partition = pyo3::intern!(py, "partition");
        let s_offset = pyo3::intern!(py, "offset");
        let s_key = pyo3::intern!(py, "key");
        let s_value = pyo3::intern!(py, "value");
        for (idx, rec) in records.iter().enumerate() {
            let partition: i64 = rec.getattr(s_partition)?.extract()?;
            let offset: i64 = rec.getattr(s_offset)?.extract()?;
            let h = high.entry(partition).or_insert(-1);
            if offset > *h {
                *h = offset;
            }
            if offset <= *progress.get(&partition).unwrap_or(&-1) {
                skipped += 1;
                continue;
            }
            let value = rec.getattr(s_value)?;
            let Ok(value) = value.downcast::<PyBytes>() else {
                dead.push(idx);
                continue;
            };
            let bytes = value.as_bytes();
            let Some(env) = self.schemas.decode(bytes) else {
                dead.push(idx);
                continue;
            };
            let key = rec.getattr(s_key)?;
            if !key.is_none() {
                match key.downcast::<PyBytes>() {
                    Ok(k) if k.as_bytes() == env.session_id.as_bytes() => {}
                    _ => {
                        dead.push(idx);
                        continue;
                    }
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
                sealed: env.sealed_parts > 0,
                surface_op: env.surface_op,
            };
            let g = groups.entry(ev.session_id.clone()).or_insert_with(|| {
                order.push(ev.session_id.clone());
                (partition, Vec::new())
            });
            g.1.push(Item { idx, offset, ev });
        }
        let mut native = Vec::new();
        let mut handed = Vec::new();
        for sid in order {
            let (partition, items) = groups.remove(&sid).unwrap_or((0, Vec::new()));
            if python_owned.contains(&sid) || !items.iter().all(|it| self.foldable(&it.ev)) {
                handed.push((sid, items.iter().map(|it| it.idx).collect()));
                continue;
            }
            let window = self.window;
            let before = self.sessions.get(&sid).cloned();
            let sess = self.sessions.entry(sid.clone())
                .or_insert_with(|| Sess::new(&sid, partition, window));
            let mut py_idx = Vec::new();
            let mut touched = false;
            for it in &items {
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
                        continue;
                    }
                    Verdict::Rejected(code, reason) => {
                        sess.count(code);
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
                if self.python_types.contains(t) {
                    py_idx.push(it.idx);
                }
                sess.as_of_seq = ev.seq;
            }
            if touched {
                self.snapshots.insert(sid.clone(), before);
                native.push((sid, partition, py_idx));
            }
        }
        Ok((dead, native, handed, high, skipped))
    }

    /// Undo this batch's fold of `session_id` (a Python unit failed on one of its
    /// events): back to its state before the last `fold`, to be handed to the caller.
    fn restore(&mut self, session_id: &str) {
        match self.snapshots.remove(session_id) {
            Some(Some(s)) => {
                self.sessions.insert(session_id.to_string(), s);
            }
            Some(None) => {
                self.sessions.remove(session_id);
            }
            None => {}
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

    /// The next chunked_fields of the session gives every item (its last write did not
    /// apply).
    fn rewrite(&mut self, session_id: &str) {
        if let Some(s) = self.sessions.get_mut(session_id) {
            s.marks = chunks::Marks::default();
            s.more.todo.dirty_from = 0;
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
        Ok(out)
    }

    fn forget(&mut self) {
        self.sessions.clear();
        self.snapshots.clear();
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
    fn fields_of<'py>(&mut self, py: Python<'py>, session_id: &str, changed_only: bool,
                      chunk: usize) -> PyResult<Option<FieldsOut<'py>>> {
        let Some(s) = self.sessions.get_mut(session_id) else { return Ok(None) };
        let d = PyDict::new(py);
        let mask = if changed_only { s.changed } else { 0xffff };
        let mut changed = Vec::new();
        let mut parts = Vec::new();
        for (bit, key) in [(INDEX, "index"), (TURNS, "turns"), (USAGE, "usage"), (PLAN, "plan"),
                           (GOAL, "goal"), (REJECTIONS, "rejections")]
                           .into_iter().chain(units_more::KEYS) {
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
                (_, None) => s.more.encode(bit).unwrap_or_default(),
            };
            d.set_item(format!("view:{key}"), view)?;
            d.set_item(format!("state:{key}"), state)?;
            d.set_item(format!("sv:{key}"), self.versions.get(key).copied().unwrap_or(1).to_string())?;
        }
        d.set_item("admission", s.adm.text())?;
        d.set_item("meta", s.meta())?;
        d.set_item("as_of_seq", s.as_of_seq.to_string())?;
        d.set_item("as_of_offset", s.as_of_offset.to_string())?;
        s.changed = 0;
        Ok(Some((d, changed, parts)))
    }

    fn foldable(&self, ev: &Ev) -> bool {
        if ev.format_version > self.format_version || ev.sealed {
            return false; // quarantine, or sealed content: the Python reference does it
        }
        if !self.catalog.contains(&ev.etype) && !ev.ignorable {
            return false; // unknown required type: quarantine
        }
        units::prescan(ev) && units_more::prescan(ev)
    }
}

/// The unit keys folded natively.
#[pyfunction]
fn native_units() -> Vec<&'static str> {
    NATIVE_UNITS.to_vec()
}

#[pymodule]
fn sessionstream_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Folder>()?;
    m.add_function(wrap_pyfunction!(native_units, m)?)?;
    Ok(())
}
