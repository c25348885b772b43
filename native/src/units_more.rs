//! The built-in units ported after the first six: tools, todo, business, compaction.
//!
//! Each mirrors its Python unit in `sessionstream.core.projections` (tools.py,
//! domain.py's TodoUnit, business.py, compaction.py) exactly: the same "changed"
//! answers (the Python unit returns the very same state object when an event does not
//! concern it), the same canonical JSON texts of view and dump. Insertion order is
//! kept where Python's dicts keep it (a key set again keeps its first position).
//! `prescan` tells whether the data has the shapes these units read; when it does
//! not, the session goes to the Python reference, which raises what it always did.

use std::collections::BTreeMap;
use foldhash::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::json::{is_float_text, write_int, write_opt_int, write_opt_str, write_str, write_value};
use crate::units::Ev;

pub const TOOLS: u16 = 64;
pub const TODO: u16 = 128;
pub const BUSINESS: u16 = 256;
pub const COMPACTION: u16 = 512;

/// (bit, unit key) of the units in this module.
pub const KEYS: [(u16, &str); 4] =
    [(TOOLS, "tools"), (TODO, "todo"), (BUSINESS, "business"), (COMPACTION, "compaction")];

/// The four units' states of one session.
#[derive(Clone, Debug, Default)]
pub struct More {
    pub tools: Tools,
    pub todo: Todo,
    pub business: Business,
    pub compaction: Compaction,
}

impl More {
    /// Fold one admitted, known event; the bits of the units whose state changed.
    pub fn apply(&mut self, ev: &Ev) -> u16 {
        let mut bits = 0;
        match ev.etype.as_str() {
            "assistant/message" | "tool/call" | "tool/result" => {
                if self.tools.apply(ev) {
                    bits |= TOOLS;
                }
            }
            "turn/end" => {
                if self.tools.apply(ev) {
                    bits |= TOOLS;
                }
            }
            "todo/add" | "todo/update" => {
                if self.todo.apply(ev) {
                    bits |= TODO;
                }
            }
            "goal/set" | "business/metric" | "business/filters" | "business/time"
            | "business/ambiguities" | "business/plan" | "business/approval" => {
                if self.business.apply(ev) {
                    bits |= BUSINESS;
                }
            }
            "compaction/start" | "compaction/summary" | "compaction/end" | "user/message"
            | "session/end-seed" => {
                if self.compaction.apply(ev) {
                    bits |= COMPACTION;
                }
            }
            _ => {}
        }
        bits
    }

    /// (view, dump) texts of the unit of `bit`, None if it is not one of these.
    pub fn encode(&self, bit: u16) -> Option<(String, String)> {
        match bit {
            TOOLS => Some((self.tools.view(), self.tools.dump())),
            TODO => Some((self.todo.view(), self.todo.dump())),
            BUSINESS => Some((self.business.view(), self.business.dump())),
            COMPACTION => {
                let t = self.compaction.text();
                Some((t.clone(), t))
            }
            _ => None,
        }
    }
}

// -- shapes ------------------------------------------------------------------------------------

fn is_str(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::String(_)))
}

fn str_or_none(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null) | Some(Value::String(_)))
}

/// Whether these units fold `ev` exactly as the Python ones would.
pub fn prescan(ev: &Ev) -> bool {
    let Some(d) = ev.data.as_object() else {
        return !matches!(ev.etype.as_str(),
            "assistant/message" | "tool/call" | "tool/result" | "turn/end" | "todo/add"
            | "todo/update" | "goal/set" | "compaction/start" | "compaction/summary"
            | "compaction/end")
            && !ev.etype.starts_with("business/");
    };
    let has = |k: &str| d.contains_key(k);
    match ev.etype.as_str() {
        "assistant/message" => match d.get("tool_calls") {
            None => true,
            Some(v) if !crate::json::truthy(v) => true,
            Some(Value::Array(calls)) => calls.iter().all(|c| {
                c.as_object().is_some_and(|c| is_str(c.get("call_id")) && c.contains_key("name"))
            }),
            Some(_) => false,
        },
        "tool/call" => is_str(d.get("call_id")) && has("name"),
        "tool/result" => {
            is_str(d.get("call_id")) && is_str(d.get("status")) && str_or_none(d.get("operation_id"))
        }
        "turn/end" => is_str(d.get("reason")),
        "todo/add" => is_str(d.get("id")) && has("text") && str_or_none(d.get("status")),
        "todo/update" => is_str(d.get("id")) && is_str(d.get("status")),
        "goal/set" => has("goal"),
        "business/metric" => has("id") && has("definition_version") && has("status"),
        "business/filters" => has("filters"),
        "business/time" => has("time"),
        "business/ambiguities" => has("ambiguities"),
        "business/plan" => has("plan_hash"),
        "business/approval" => has("approval"),
        "compaction/start" => is_str(d.get("compaction_id")) && has("trigger"),
        "compaction/summary" => {
            is_str(d.get("compaction_id"))
                && matches!(d.get("shadowed_seqs"), Some(Value::Array(_)))
                && ["first_position", "last_position", "tokens_before", "tokens_after",
                    "summarizer"].iter().all(|k| has(k))
        }
        "compaction/end" => is_str(d.get("compaction_id")) && is_str(d.get("outcome")),
        _ => true,
    }
}

fn get<'a>(ev: &'a Ev, k: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    ev.data.as_object().and_then(|d| d.get(k)).unwrap_or(&NULL)
}

fn get_str<'a>(ev: &'a Ev, k: &str) -> &'a str {
    get(ev, k).as_str().unwrap_or("")
}

fn write_counts(o: &mut String, counts: &BTreeMap<String, i64>) {
    o.push('{');
    for (i, (k, v)) in counts.iter().enumerate() {
        if i > 0 {
            o.push(',');
        }
        write_str(o, k);
        o.push(':');
        write_int(o, *v);
    }
    o.push('}');
}

fn bump(counts: &mut BTreeMap<String, i64>, k: &str, by: i64) {
    *counts.entry(k.to_string()).or_insert(0) += by;
}

fn write_list<'a>(o: &mut String, rows: impl Iterator<Item = &'a str>) {
    o.push('[');
    for (i, r) in rows.enumerate() {
        if i > 0 {
            o.push(',');
        }
        o.push_str(r);
    }
    o.push(']');
}

/// Python's `==` on frozen JSON: numbers by value across int/float/bool (1 == 1.0 ==
/// True), containers element by element, an object never equal to an array.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        (Value::Bool(_) | Value::Number(_), Value::Bool(_) | Value::Number(_)) => {
            match (num(a), num(b)) {
                (Some(Num::I(x)), Some(Num::I(y))) => x == y,
                (Some(Num::F(x)), Some(Num::F(y))) => x == y,
                (Some(Num::I(i)), Some(Num::F(f))) | (Some(Num::F(f)), Some(Num::I(i))) => {
                    int_eq_float(i, f)
                }
                _ => false,
            }
        }
        _ => false,
    }
}

enum Num {
    I(i64),
    F(f64),
}

fn num(v: &Value) -> Option<Num> {
    match v {
        Value::Bool(b) => Some(Num::I(*b as i64)),
        Value::Number(n) => {
            let s = n.as_str();
            if is_float_text(s) {
                s.parse::<f64>().ok().map(Num::F)
            } else {
                s.parse::<i64>().ok().map(Num::I)
            }
        }
        _ => None,
    }
}

/// Exact comparison, as Python compares an int with a float (no rounding of the int).
fn int_eq_float(i: i64, f: f64) -> bool {
    if f.fract() != 0.0 || !(-9.223372036854775808e18..9.223372036854775808e18).contains(&f) {
        return false;
    }
    f as i64 == i
}

/// An insertion-ordered map (Python dict order: setting a present key keeps its place).
#[derive(Clone, Debug)]
pub struct Ordered<T> {
    items: Vec<(String, T)>,
}

impl<T> Default for Ordered<T> {
    fn default() -> Ordered<T> {
        Ordered { items: Vec::new() }
    }
}

impl<T> Ordered<T> {
    fn get(&self, k: &str) -> Option<&T> {
        self.items.iter().find(|(key, _)| key == k).map(|(_, v)| v)
    }

    pub(crate) fn set(&mut self, k: &str, v: T) {
        match self.items.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v,
            None => self.items.push((k.to_string(), v)),
        }
    }

    fn remove(&mut self, k: &str) -> Option<T> {
        let i = self.items.iter().position(|(key, _)| key == k)?;
        Some(self.items.remove(i).1)
    }

    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn values(&self) -> impl Iterator<Item = &T> {
        self.items.iter().map(|(_, v)| v)
    }
}

// -- tools -------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Call {
    pub call_id: String,
    pub name: Value,
    pub declared_seq: Option<i64>,
    pub call_seq: Option<i64>,
    pub idempotency_key: Value,
    pub turn_id: Option<String>,
}

impl Call {
    fn write(&self, o: &mut String) {
        o.push_str("{\"call_id\":");
        write_str(o, &self.call_id);
        o.push_str(",\"call_seq\":");
        write_opt_int(o, self.call_seq);
        o.push_str(",\"declared_seq\":");
        write_opt_int(o, self.declared_seq);
        o.push_str(",\"idempotency_key\":");
        write_value(o, &self.idempotency_key);
        o.push_str(",\"name\":");
        write_value(o, &self.name);
        o.push_str(",\"turn_id\":");
        write_opt_str(o, self.turn_id.as_deref());
        o.push('}');
    }
}

/// A tool result, kept as its canonical row text.
#[derive(Debug)]
pub struct ResultRow {
    pub call_id: String,
    pub operation_id: Option<String>,
    pub text: String,
}

#[derive(Clone, Debug, Default)]
pub struct Tools {
    pub declared: Ordered<Call>,
    pub open: Ordered<Call>,
    pub results: Vec<Arc<ResultRow>>,
    pub abandoned: Vec<Arc<str>>,
    pub counts: BTreeMap<String, i64>,
}

impl Tools {
    /// Whether the state changed.
    pub fn apply(&mut self, ev: &Ev) -> bool {
        match ev.etype.as_str() {
            "assistant/message" => {
                let Some(Value::Array(calls)) = ev.data.get("tool_calls") else { return false };
                if calls.is_empty() {
                    return false;
                }
                for c in calls {
                    let cid = c.get("call_id").and_then(Value::as_str).unwrap_or("");
                    let name = c.get("name").cloned().unwrap_or(Value::Null);
                    self.declared.set(cid, Call {
                        call_id: cid.to_string(), name, declared_seq: Some(ev.seq), call_seq: None,
                        idempotency_key: Value::Null, turn_id: ev.turn_id.clone(),
                    });
                }
                true
            }
            "tool/call" => {
                let cid = get_str(ev, "call_id");
                let prior = self.declared.remove(cid);
                let call = Call {
                    call_id: cid.to_string(),
                    name: get(ev, "name").clone(),
                    declared_seq: prior.and_then(|p| p.declared_seq),
                    call_seq: Some(ev.seq),
                    idempotency_key: get(ev, "idempotency_key").clone(),
                    turn_id: ev.turn_id.clone(),
                };
                self.open.set(cid, call);
                true
            }
            "tool/result" => {
                let cid = get_str(ev, "call_id");
                let status = get_str(ev, "status");
                let found = self.open.get(cid).or_else(|| self.declared.get(cid));
                let name = found.map(|c| c.name.clone()).unwrap_or_else(|| Value::String(String::new()));
                let call_seq = found.and_then(|c| c.call_seq);
                let op = get(ev, "operation_id").as_str().map(str::to_string);
                let mut o = String::with_capacity(160);
                o.push_str("{\"call_id\":");
                write_str(&mut o, cid);
                o.push_str(",\"call_seq\":");
                write_opt_int(&mut o, call_seq);
                o.push_str(",\"name\":");
                write_value(&mut o, &name);
                o.push_str(",\"operation_id\":");
                write_opt_str(&mut o, op.as_deref());
                o.push_str(",\"result_seq\":");
                write_int(&mut o, ev.seq);
                o.push_str(",\"status\":");
                write_str(&mut o, status);
                o.push_str(",\"version\":");
                write_value(&mut o, get(ev, "version"));
                o.push('}');
                self.declared.remove(cid);
                self.open.remove(cid);
                self.results.push(Arc::new(ResultRow { call_id: cid.to_string(), operation_id: op, text: o }));
                bump(&mut self.counts, status, 1);
                true
            }
            "turn/end" => {
                if self.declared.is_empty() && self.open.is_empty() {
                    return false;
                }
                let reason = get(ev, "reason");
                let n = (self.declared.len() + self.open.len()) as i64;
                for (stage, calls) in [("declared", &self.declared), ("executing", &self.open)] {
                    for c in calls.values() {
                        let mut o = String::with_capacity(120);
                        o.push_str("{\"call_id\":");
                        write_str(&mut o, &c.call_id);
                        o.push_str(",\"name\":");
                        write_value(&mut o, &c.name);
                        o.push_str(",\"reason\":");
                        write_value(&mut o, reason);
                        o.push_str(",\"stage\":");
                        write_str(&mut o, stage);
                        o.push_str(",\"turn_end_seq\":");
                        write_int(&mut o, ev.seq);
                        o.push('}');
                        self.abandoned.push(Arc::from(o));
                    }
                }
                self.declared = Ordered::default();
                self.open = Ordered::default();
                bump(&mut self.counts, "abandoned", n);
                true
            }
            _ => false,
        }
    }

    fn write_calls(o: &mut String, calls: &Ordered<Call>) {
        o.push('[');
        for (i, c) in calls.values().enumerate() {
            if i > 0 {
                o.push(',');
            }
            c.write(o);
        }
        o.push(']');
    }

    /// The chunked head (ADR 0013): `{"counts","declared","open"}`, view and state alike.
    pub fn head_text(&self) -> String {
        let mut o = String::from("{\"counts\":");
        write_counts(&mut o, &self.counts);
        o.push_str(",\"declared\":");
        Self::write_calls(&mut o, &self.declared);
        o.push_str(",\"open\":");
        Self::write_calls(&mut o, &self.open);
        o.push('}');
        o
    }

    fn head(&self, o: &mut String) {
        o.push_str("{\"abandoned\":");
        write_list(o, self.abandoned.iter().map(|a| &**a));
        o.push_str(",\"counts\":");
        write_counts(o, &self.counts);
        o.push_str(",\"declared\":");
        Self::write_calls(o, &self.declared);
        o.push_str(",\"open\":");
        Self::write_calls(o, &self.open);
    }

    pub fn view(&self) -> String {
        let mut o = String::with_capacity(256 + self.results.len() * 200);
        self.head(&mut o);
        let mut by_call: BTreeMap<&str, &str> = BTreeMap::new();
        let mut by_op: BTreeMap<&str, &str> = BTreeMap::new();
        for r in &self.results {
            by_call.insert(&r.call_id, &r.text);
            if let Some(op) = &r.operation_id {
                by_op.insert(op, &r.call_id);
            }
        }
        o.push_str(",\"operation_ids\":{");
        for (i, (op, cid)) in by_op.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_str(&mut o, op);
            o.push(':');
            write_str(&mut o, cid);
        }
        o.push_str("},\"results\":{");
        for (i, (cid, text)) in by_call.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_str(&mut o, cid);
            o.push(':');
            o.push_str(text);
        }
        o.push_str("}}");
        o
    }

    pub fn dump(&self) -> String {
        let mut o = String::with_capacity(256 + self.results.len() * 200);
        self.head(&mut o);
        o.push_str(",\"results\":");
        write_list(&mut o, self.results.iter().map(|r| r.text.as_str()));
        o.push('}');
        o
    }
}

// -- todo --------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct TodoItem {
    pub id: String,
    pub text: Value,
    pub status: String,
    pub added_seq: i64,
    pub updated_seq: i64,
}

impl TodoItem {
    fn write(&self, o: &mut String) {
        o.push_str("{\"added_seq\":");
        write_int(o, self.added_seq);
        o.push_str(",\"id\":");
        write_str(o, &self.id);
        o.push_str(",\"status\":");
        write_str(o, &self.status);
        o.push_str(",\"text\":");
        write_value(o, &self.text);
        o.push_str(",\"updated_seq\":");
        write_int(o, self.updated_seq);
        o.push('}');
    }
}

#[derive(Clone, Debug, Default)]
pub struct Todo {
    pub items: Vec<TodoItem>, // insertion order; never removed
    pub index: HashMap<String, usize>,
    pub unknown_updates: i64,
    /// The lowest item position changed since the last chunked write (chunks.rs).
    pub dirty_from: usize,
    /// While a batch may still be undone (crate::undo): the item count before it, and
    /// the items before that count it overwrote, as they were (oldest change first).
    pub undo: Option<(usize, Vec<(usize, TodoItem)>)>,
    /// How many items have each status (kept as items change: the view's counts
    /// without a walk over every item per write).
    pub statuses: BTreeMap<String, i64>,
}

impl Todo {
    pub fn apply(&mut self, ev: &Ev) -> bool {
        let id = get_str(ev, "id");
        let at = self.index.get(id).copied();
        match ev.etype.as_str() {
            "todo/add" => {
                let old = at.map(|i| &self.items[i]);
                let status = match get(ev, "status").as_str() {
                    Some(s) if !s.is_empty() => s.to_string(),
                    _ => old.map(|o| o.status.clone()).unwrap_or_else(|| "pending".to_string()),
                };
                let item = TodoItem {
                    id: id.to_string(), text: get(ev, "text").clone(), status,
                    added_seq: old.map(|o| o.added_seq).unwrap_or(ev.seq), updated_seq: ev.seq,
                };
                self.dirty_from = self.dirty_from.min(at.unwrap_or(self.items.len()));
                match at {
                    Some(i) => {
                        self.journal(i);
                        let old = std::mem::replace(&mut self.items[i], item);
                        self.recount(Some(&old.status), &self.items[i].status.clone());
                    }
                    None => self.push(item),
                }
                true
            }
            "todo/update" => {
                let Some(i) = at else {
                    self.unknown_updates += 1;
                    return true;
                };
                let status = get_str(ev, "status");
                if self.items[i].status == status {
                    return false;
                }
                self.journal(i);
                let item = &mut self.items[i];
                let old = std::mem::replace(&mut item.status, status.to_string());
                item.updated_seq = ev.seq;
                self.recount(Some(&old), status);
                self.dirty_from = self.dirty_from.min(i);
                true
            }
            _ => false,
        }
    }

    /// Keep item `i` as it is for an undo of this batch (items added by the batch are
    /// dropped whole instead).
    pub(crate) fn journal(&mut self, i: usize) {
        if let Some((before, saved)) = self.undo.as_mut() {
            if i < *before {
                saved.push((i, self.items[i].clone()));
            }
        }
    }

    fn write_items(&self, o: &mut String) {
        o.push('[');
        for (i, it) in self.items.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            it.write(o);
        }
        o.push(']');
    }

    fn counts(&self) -> &BTreeMap<String, i64> {
        &self.statuses
    }

    /// Add a new item at the end (its id is not indexed yet).
    pub(crate) fn push(&mut self, item: TodoItem) {
        self.index.insert(item.id.clone(), self.items.len());
        self.recount(None, &item.status.clone());
        self.items.push(item);
    }

    /// An item's status went from `old` (None: a new item) to `new`.
    fn recount(&mut self, old: Option<&str>, new: &str) {
        if let Some(old) = old {
            if let Some(n) = self.statuses.get_mut(old) {
                *n -= 1;
                if *n == 0 {
                    self.statuses.remove(old);
                }
            }
        }
        bump(&mut self.statuses, new, 1);
    }

    /// The chunked heads (ADR 0013): view `{"counts","unknown_updates"}`, state
    /// `{"unknown_updates"}`.
    pub fn heads(&self) -> (String, String) {
        let mut v = String::from("{\"counts\":");
        write_counts(&mut v, &self.counts());
        v.push_str(",\"unknown_updates\":");
        write_int(&mut v, self.unknown_updates);
        v.push('}');
        let mut s = String::from("{\"unknown_updates\":");
        write_int(&mut s, self.unknown_updates);
        s.push('}');
        (v, s)
    }

    /// The texts of the items from position `start` on.
    pub fn item_texts(&self, start: usize) -> Vec<String> {
        self.items[start.min(self.items.len())..].iter().map(|it| {
            let mut o = String::with_capacity(100);
            it.write(&mut o);
            o
        }).collect()
    }

    pub fn view(&self) -> String {
        let counts = self.counts();
        let mut o = String::with_capacity(64 + self.items.len() * 100);
        o.push_str("{\"counts\":");
        write_counts(&mut o, &counts);
        o.push_str(",\"items\":");
        self.write_items(&mut o);
        o.push_str(",\"unknown_updates\":");
        write_int(&mut o, self.unknown_updates);
        o.push('}');
        o
    }

    pub fn dump(&self) -> String {
        let mut o = String::with_capacity(64 + self.items.len() * 100);
        o.push_str("{\"items\":");
        self.write_items(&mut o);
        o.push_str(",\"unknown_updates\":");
        write_int(&mut o, self.unknown_updates);
        o.push('}');
        o
    }
}

// -- business ----------------------------------------------------------------------------------

/// The business fields, in canonical (sorted) order.
pub(crate) const BUSINESS_FIELDS: [&str; 7] = FIELDS;
const FIELDS: [&str; 7] =
    ["ambiguities", "approval", "filters", "goal", "metric", "plan_hash", "time"];
const AMBIGUITIES: usize = 0;
const APPROVAL: usize = 1;
const FILTERS: usize = 2;
const GOAL: usize = 3;
const METRIC: usize = 4;
const PLAN_HASH: usize = 5;
const TIME: usize = 6;

#[derive(Clone, Debug)]
pub struct Business {
    pub values: [Value; 7],
    pub sources: [Option<i64>; 7],
    pub invalidations: Vec<(i64, &'static str)>,
}

impl Default for Business {
    fn default() -> Business {
        Business {
            values: [Value::Array(Vec::new()), Value::String("pending".into()),
                     Value::Object(Map::new()), Value::Null, Value::Null, Value::Null, Value::Null],
            sources: [None; 7],
            invalidations: Vec::new(),
        }
    }
}

fn metric_identity(m: &Value) -> Option<(&Value, &Value)> {
    static NULL: Value = Value::Null;
    match m {
        Value::Null => None,
        m => Some((m.get("id").unwrap_or(&NULL), m.get("definition_version").unwrap_or(&NULL))),
    }
}

impl Business {
    pub fn apply(&mut self, ev: &Ev) -> bool {
        let seq = ev.seq;
        match ev.etype.as_str() {
            "goal/set" => self.set(seq, vec![(GOAL, get(ev, "goal").clone())], None),
            "business/metric" => {
                let mut m = Map::new();
                for k in ["id", "definition_version", "status", "source_turn"] {
                    m.insert(k.to_string(), get(ev, k).clone());
                }
                let metric = Value::Object(m);
                let changed = match (metric_identity(&metric), metric_identity(&self.values[METRIC])) {
                    (Some((a, b)), Some((c, d))) => !(py_eq(a, c) && py_eq(b, d)),
                    (None, None) => false,
                    _ => true,
                };
                self.set(seq, vec![(METRIC, metric)], changed.then_some("metric changed"))
            }
            "business/filters" => {
                let f = get(ev, "filters").clone();
                let changed = !py_eq(&f, &self.values[FILTERS]);
                self.set(seq, vec![(FILTERS, f)], changed.then_some("filters changed"))
            }
            "business/time" => self.set(seq, vec![(TIME, get(ev, "time").clone())], None),
            "business/ambiguities" => {
                self.set(seq, vec![(AMBIGUITIES, get(ev, "ambiguities").clone())], None)
            }
            "business/plan" => self.set(seq, vec![(PLAN_HASH, get(ev, "plan_hash").clone())], None),
            "business/approval" => {
                self.set(seq, vec![(APPROVAL, get(ev, "approval").clone())], None)
            }
            _ => false,
        }
    }

    fn set(&mut self, seq: i64, mut updates: Vec<(usize, Value)>, invalidate: Option<&'static str>)
           -> bool {
        if invalidate.is_some() {
            updates.push((PLAN_HASH, Value::Null));
            updates.push((APPROVAL, Value::String("pending".into())));
        } else if updates.iter().all(|(k, v)| py_eq(&self.values[*k], v) && self.sources[*k].is_some()) {
            return false; // the same value asserted again: nothing changes
        }
        for (k, v) in updates {
            self.values[k] = v;
            self.sources[k] = Some(seq);
        }
        if let Some(why) = invalidate {
            self.invalidations.push((seq, why));
        }
        true
    }

    fn write_sources(&self, o: &mut String) {
        o.push('{');
        let mut first = true;
        for (k, s) in FIELDS.iter().zip(self.sources.iter()) {
            if let Some(s) = s {
                if !first {
                    o.push(',');
                }
                first = false;
                write_str(o, k);
                o.push(':');
                write_int(o, *s);
            }
        }
        o.push('}');
    }

    pub fn view(&self) -> String {
        let mut o = String::with_capacity(256);
        let field = |o: &mut String, i: usize, lead: &str| {
            o.push_str(lead);
            write_str(o, FIELDS[i]);
            o.push(':');
            write_value(o, &self.values[i]);
        };
        field(&mut o, AMBIGUITIES, "{");
        field(&mut o, APPROVAL, ",");
        field(&mut o, FILTERS, ",");
        field(&mut o, GOAL, ",");
        o.push_str(",\"invalidations\":[");
        for (i, (s, r)) in self.invalidations.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str("{\"reason\":");
            write_str(&mut o, r);
            o.push_str(",\"seq\":");
            write_int(&mut o, *s);
            o.push('}');
        }
        o.push(']');
        field(&mut o, METRIC, ",");
        field(&mut o, PLAN_HASH, ",");
        o.push_str(",\"sources\":");
        self.write_sources(&mut o);
        field(&mut o, TIME, ",");
        o.push('}');
        o
    }

    pub fn dump(&self) -> String {
        let mut o = String::from("{\"invalidations\":[");
        for (i, (s, r)) in self.invalidations.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push('[');
            write_int(&mut o, *s);
            o.push(',');
            write_str(&mut o, r);
            o.push(']');
        }
        o.push_str("],\"sources\":");
        self.write_sources(&mut o);
        o.push_str(",\"values\":{");
        for (i, (k, v)) in FIELDS.iter().zip(self.values.iter()).enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_str(&mut o, k);
            o.push(':');
            write_value(&mut o, v);
        }
        o.push_str("}}");
        o
    }
}

// -- compaction --------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Attempt {
    pub compaction_id: String,
    pub trigger: Value,
    pub start_seq: i64,
    pub first_position: Value,
    pub last_position: Value,
    pub shadowed_seqs: Vec<Value>,
    pub tokens_before: Value,
    pub tokens_after: Value,
    pub summarizer: Value,
    pub summary_seq: Option<i64>,
    pub replacement_seq: Option<i64>,
    pub outcome: Option<String>,
    pub reason: Value,
    pub end_seq: Option<i64>,
    pub from_seed: bool,
}

impl Attempt {
    fn new(compaction_id: &str, trigger: Value, start_seq: i64) -> Attempt {
        Attempt {
            compaction_id: compaction_id.to_string(), trigger, start_seq,
            first_position: Value::Null, last_position: Value::Null, shadowed_seqs: Vec::new(),
            tokens_before: Value::Null, tokens_after: Value::Null, summarizer: Value::Null,
            summary_seq: None, replacement_seq: None, outcome: None, reason: Value::Null,
            end_seq: None, from_seed: false,
        }
    }

    fn write(&self, o: &mut String) {
        o.push_str("{\"compaction_id\":");
        write_str(o, &self.compaction_id);
        o.push_str(",\"end_seq\":");
        write_opt_int(o, self.end_seq);
        o.push_str(",\"first_position\":");
        write_value(o, &self.first_position);
        o.push_str(",\"from_seed\":");
        o.push_str(if self.from_seed { "true" } else { "false" });
        o.push_str(",\"last_position\":");
        write_value(o, &self.last_position);
        o.push_str(",\"outcome\":");
        write_opt_str(o, self.outcome.as_deref());
        o.push_str(",\"reason\":");
        write_value(o, &self.reason);
        o.push_str(",\"replacement_seq\":");
        write_opt_int(o, self.replacement_seq);
        o.push_str(",\"shadowed_seqs\":[");
        for (i, s) in self.shadowed_seqs.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_value(o, s);
        }
        o.push_str("],\"start_seq\":");
        write_int(o, self.start_seq);
        o.push_str(",\"summarizer\":");
        write_value(o, &self.summarizer);
        o.push_str(",\"summary_seq\":");
        write_opt_int(o, self.summary_seq);
        o.push_str(",\"tokens_after\":");
        write_value(o, &self.tokens_after);
        o.push_str(",\"tokens_before\":");
        write_value(o, &self.tokens_before);
        o.push_str(",\"trigger\":");
        write_value(o, &self.trigger);
        o.push('}');
    }
}

#[derive(Clone, Debug, Default)]
pub struct Compaction {
    pub attempts: Vec<Arc<str>>, // closed attempts, as canonical text
    pub open: Option<Attempt>,
    pub outcomes: BTreeMap<String, i64>,
}

impl Compaction {
    fn close(&mut self, outcome: &str, reason: Value, seq: i64) {
        if let Some(mut a) = self.open.take() {
            a.outcome = Some(outcome.to_string());
            a.reason = reason;
            a.end_seq = Some(seq);
            let mut o = String::with_capacity(400);
            a.write(&mut o);
            self.attempts.push(Arc::from(o));
            bump(&mut self.outcomes, outcome, 1);
        }
    }

    pub fn apply(&mut self, ev: &Ev) -> bool {
        let t = ev.etype.as_str();
        if t == "compaction/start" {
            if self.open.is_some() {
                self.close("abandoned", Value::String("superseded by a new start".into()), ev.seq);
            }
            self.open = Some(Attempt::new(get_str(ev, "compaction_id"), get(ev, "trigger").clone(),
                                          ev.seq));
            return true;
        }
        let Some(open) = self.open.as_mut() else { return false };
        if t.starts_with("compaction/") && get_str(ev, "compaction_id") != open.compaction_id {
            return false;
        }
        match t {
            "compaction/summary" => {
                open.first_position = get(ev, "first_position").clone();
                open.last_position = get(ev, "last_position").clone();
                open.shadowed_seqs = get(ev, "shadowed_seqs").as_array().cloned().unwrap_or_default();
                open.tokens_before = get(ev, "tokens_before").clone();
                open.tokens_after = get(ev, "tokens_after").clone();
                open.summarizer = get(ev, "summarizer").clone();
                open.summary_seq = Some(ev.seq);
                true
            }
            "user/message" => {
                if ev.surface_op != SURFACE_REPLACE {
                    return false;
                }
                open.replacement_seq = Some(ev.seq);
                true
            }
            "compaction/end" => {
                let outcome = get_str(ev, "outcome").to_string();
                self.close(&outcome, get(ev, "reason").clone(), ev.seq);
                true
            }
            "session/end-seed" => {
                open.from_seed = true;
                true
            }
            _ => false,
        }
    }

    /// The chunked head (ADR 0013): `{"open","outcomes"}`, view and state alike.
    pub fn head_text(&self) -> String {
        let mut o = String::from("{\"open\":");
        match &self.open {
            Some(a) => a.write(&mut o),
            None => o.push_str("null"),
        }
        o.push_str(",\"outcomes\":");
        write_counts(&mut o, &self.outcomes);
        o.push('}');
        o
    }

    pub fn text(&self) -> String {
        let mut o = String::with_capacity(64 + self.attempts.len() * 400);
        o.push_str("{\"attempts\":");
        write_list(&mut o, self.attempts.iter().map(|a| &**a));
        o.push_str(",\"open\":");
        match &self.open {
            Some(a) => a.write(&mut o),
            None => o.push_str("null"),
        }
        o.push_str(",\"outcomes\":");
        write_counts(&mut o, &self.outcomes);
        o.push('}');
        o
    }
}

/// `SurfaceOp` symbol index of `replace` in the envelope schema.
pub const SURFACE_REPLACE: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_checked;

    fn ev(etype: &str, seq: i64, data: &str) -> Ev {
        Ev {
            session_id: "s".into(), seq, event_id: format!("e{seq}"), time: seq,
            etype: etype.into(), data: parse_checked(data).unwrap(), writer_id: "w".into(),
            writer_epoch: 1, ignorable: false, turn_id: Some("t1".into()), step_id: None,
            format_version: 1, prev_event_id: None, surface_op: 0,
            source_event_seqs: Vec::new(), py: None,
        }
    }

    fn v(s: &str) -> Value {
        parse_checked(s).unwrap()
    }

    #[test]
    fn python_equality_of_json_values() {
        assert!(py_eq(&v("1"), &v("1.0")));
        assert!(py_eq(&v("true"), &v("1")));
        assert!(py_eq(&v("0.0"), &v("false")));
        assert!(py_eq(&v("{\"a\":[1,2.0]}"), &v("{\"a\":[1.0,2]}")));
        assert!(!py_eq(&v("{}"), &v("[]")));
        assert!(!py_eq(&v("1"), &v("\"1\"")));
        assert!(!py_eq(&v("null"), &v("0")));
        assert!(!py_eq(&v("9007199254740993"), &v("9007199254740992.0")));
        assert!(py_eq(&v("-0.0"), &v("0")));
    }

    #[test]
    fn a_key_set_again_keeps_its_place() {
        let mut m = Ordered::default();
        m.set("a", 1);
        m.set("b", 2);
        m.set("a", 3);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), vec![3, 2]);
        assert_eq!(m.remove("a"), Some(3));
        assert_eq!(m.get("b"), Some(&2));
    }

    #[test]
    fn tools_pair_calls_and_abandon_at_turn_end() {
        let mut t = Tools::default();
        assert!(!t.apply(&ev("assistant/message", 1, "{\"tool_calls\":[]}")));
        assert!(t.apply(&ev("assistant/message", 2,
            "{\"tool_calls\":[{\"call_id\":\"c1\",\"name\":\"ls\"},{\"call_id\":\"c2\",\"name\":\"cat\"}]}")));
        assert!(t.apply(&ev("tool/call", 3, "{\"call_id\":\"c1\",\"name\":\"ls\"}")));
        assert!(t.apply(&ev("tool/result", 4,
            "{\"call_id\":\"c1\",\"status\":\"ok\",\"operation_id\":\"op\",\"version\":1.5}")));
        assert!(t.apply(&ev("turn/end", 5, "{\"reason\":\"done\"}")));
        assert!(!t.apply(&ev("turn/end", 6, "{\"reason\":\"done\"}")));
        assert_eq!(t.view(), concat!(
            "{\"abandoned\":[{\"call_id\":\"c2\",\"name\":\"cat\",\"reason\":\"done\",",
            "\"stage\":\"declared\",\"turn_end_seq\":5}],\"counts\":{\"abandoned\":1,\"ok\":1},",
            "\"declared\":[],\"open\":[],\"operation_ids\":{\"op\":\"c1\"},\"results\":{\"c1\":",
            "{\"call_id\":\"c1\",\"call_seq\":3,\"name\":\"ls\",\"operation_id\":\"op\",",
            "\"result_seq\":4,\"status\":\"ok\",\"version\":1.5}}}"));
    }

    #[test]
    fn business_invalidates_the_plan_when_the_metric_changes() {
        let mut b = Business::default();
        assert!(b.apply(&ev("business/plan", 1, "{\"plan_hash\":\"h\"}")));
        assert!(!b.apply(&ev("business/plan", 2, "{\"plan_hash\":\"h\"}")));
        assert!(b.apply(&ev("business/metric", 3,
            "{\"id\":\"m\",\"definition_version\":1,\"status\":\"draft\"}")));
        assert!(b.apply(&ev("business/metric", 4,
            "{\"id\":\"m\",\"definition_version\":1.0,\"status\":\"final\"}")));
        assert_eq!(b.invalidations, vec![(3, "metric changed")]);
        assert!(b.values[PLAN_HASH].is_null());
        assert_eq!(b.sources[METRIC], Some(4));
    }

    #[test]
    fn compaction_keeps_an_unmatched_start_as_abandoned() {
        let mut c = Compaction::default();
        assert!(!c.apply(&ev("compaction/end", 1, "{\"compaction_id\":\"x\",\"outcome\":\"completed\"}")));
        assert!(c.apply(&ev("compaction/start", 2, "{\"compaction_id\":\"a\",\"trigger\":\"auto\"}")));
        assert!(c.apply(&ev("compaction/start", 3, "{\"compaction_id\":\"b\",\"trigger\":\"auto\"}")));
        assert!(!c.apply(&ev("user/message", 4, "{}")));
        let mut replace = ev("user/message", 5, "{}");
        replace.surface_op = SURFACE_REPLACE;
        assert!(c.apply(&replace));
        assert!(c.apply(&ev("compaction/end", 6, "{\"compaction_id\":\"b\",\"outcome\":\"completed\"}")));
        assert_eq!(c.attempts.len(), 2);
        assert!(c.attempts[0].contains("\"reason\":\"superseded by a new start\""));
        assert!(c.attempts[1].contains("\"replacement_seq\":5"));
        assert!(c.text().ends_with("\"open\":null,\"outcomes\":{\"abandoned\":1,\"completed\":1}}"));
    }

    #[test]
    fn prescan_refuses_shapes_python_would_fail_on() {
        assert!(prescan(&ev("tool/call", 1, "{\"call_id\":\"c\",\"name\":1}")));
        assert!(!prescan(&ev("tool/call", 1, "{\"call_id\":3,\"name\":\"x\"}")));
        assert!(!prescan(&ev("assistant/message", 1, "{\"tool_calls\":\"abc\"}")));
        assert!(prescan(&ev("assistant/message", 1, "{\"tool_calls\":{}}")));
        assert!(!prescan(&ev("tool/result", 1, "{\"call_id\":\"c\",\"status\":\"ok\",\"operation_id\":2}")));
        assert!(!prescan(&ev("compaction/summary", 1, "{\"compaction_id\":\"c\"}")));
        assert!(!prescan(&ev("todo/add", 1, "{\"id\":\"a\",\"text\":\"t\",\"status\":0}")));
    }
}
