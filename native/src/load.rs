//! Loading the native units' states from a stored row (the live worker's resume).
//!
//! The inverse of each unit's `dump`/`text` and of `Admission::text`: the live worker
//! meets sessions folded before (by this process before a restart, another worker
//! before a rebalance, or the Python fold) and continues them from their Redis row.
//! Each loader reads exactly the shape the dump writes and returns None for anything
//! else; the caller then re-dumps what it loaded and compares it with the stored text
//! (`Folder.load`), so a row this code would not continue byte for byte is folded by
//! the Python reference instead.

use std::collections::{BTreeMap, VecDeque};
use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::json::{as_int, dumps};
use crate::units::{Admission, Goal, Index, Plan, Rejections, Turn, Turns, Usage};

type Obj = Map<String, Value>;

fn obj(v: &Value) -> Option<&Obj> {
    v.as_object()
}

fn int(o: &Obj, k: &str) -> Option<i64> {
    as_int(o.get(k)?)
}

fn opt_int(o: &Obj, k: &str) -> Option<Option<i64>> {
    match o.get(k)? {
        Value::Null => Some(None),
        v => Some(Some(as_int(v)?)),
    }
}

fn string(o: &Obj, k: &str) -> Option<String> {
    o.get(k)?.as_str().map(str::to_string)
}

fn opt_string(o: &Obj, k: &str) -> Option<Option<String>> {
    match o.get(k)? {
        Value::Null => Some(None),
        Value::String(s) => Some(Some(s.clone())),
        _ => None,
    }
}

fn counts(v: &Value) -> Option<BTreeMap<String, i64>> {
    obj(v)?.iter().map(|(k, v)| Some((k.clone(), as_int(v)?))).collect()
}

pub fn admission(text: &str, session_id: &str) -> Option<Admission> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    if string(o, "session_id")? != session_id {
        return None;
    }
    let mut a = Admission::new(session_id, int(o, "window")?);
    a.last_event_id = opt_string(o, "last_event_id")?;
    a.linked = o.get("linked")?.as_bool()?;
    a.max_epoch = int(o, "max_epoch")?;
    a.next_seq = int(o, "next_seq")?;
    let mut recent = VecDeque::new();
    let mut ids = HashMap::new();
    for item in o.get("recent")?.as_array()? {
        let pair = item.as_array()?;
        if pair.len() != 2 {
            return None;
        }
        let id: Arc<str> = Arc::from(pair[0].as_str()?);
        let seq = as_int(&pair[1])?;
        ids.insert(id.clone(), seq);
        recent.push_back((id, seq));
    }
    a.recent = recent;
    a.ids = ids;
    Some(a)
}

pub fn index(text: &str) -> Option<Index> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    Some(Index {
        session_id: opt_string(o, "session_id")?,
        tenant: o.get("tenant")?.clone(),
        lineage: o.get("lineage")?.clone(),
        status: string(o, "status")?,
        status_reason: opt_string(o, "status_reason")?,
        status_seq: opt_int(o, "status_seq")?,
        event_count: int(o, "event_count")?,
        last_seq: int(o, "last_seq")?,
        first_time: opt_int(o, "first_time")?,
        last_time: opt_int(o, "last_time")?,
        last_type: opt_string(o, "last_type")?,
        open_turn: opt_string(o, "open_turn")?,
        turns: int(o, "turns")?,
        seeds: int(o, "seeds")?,
    })
}

fn turn(v: &Value) -> Option<Turn> {
    let o = obj(v)?;
    Some(Turn {
        turn_id: string(o, "turn_id")?,
        status: string(o, "status")?,
        start_seq: int(o, "start_seq")?,
        end_seq: opt_int(o, "end_seq")?,
        detail: o.get("detail")?.clone(),
        steps: int(o, "steps")?,
    })
}

pub fn turns(text: &str) -> Option<Turns> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let closed = o.get("closed")?.as_array()?.iter().map(|t| turn(t).map(Arc::new))
        .collect::<Option<Vec<_>>>()?;
    let open = match o.get("open")? {
        Value::Null => None,
        t => Some(turn(t)?),
    };
    Some(Turns { closed, open, open_step: opt_string(o, "open_step")?,
                 open_step_seq: opt_int(o, "open_step_seq")?, counts: counts(o.get("counts")?)? })
}

pub fn usage(text: &str) -> Option<Usage> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let route = match o.get("route")? {
        Value::Null => None,
        Value::Array(r) if r.len() == 2 => Some((r[0].as_str()?.to_string(), r[1].as_str()?.to_string())),
        _ => return None,
    };
    let mut by_model = BTreeMap::new();
    for (k, v) in obj(o.get("by_model")?)? {
        let a = v.as_array()?;
        if a.len() != 4 {
            return None;
        }
        let mut n = [0i128; 4];
        for (i, x) in a.iter().enumerate() {
            n[i] = x.as_number()?.as_str().parse::<i128>().ok()?;
        }
        by_model.insert(k.clone(), n);
    }
    Some(Usage { route, by_model })
}

pub fn plan(text: &str) -> Option<Plan> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let steps = match o.get("steps")? {
        Value::Null => None,
        Value::Array(s) => Some(s.clone()),
        _ => return None,
    };
    Some(Plan { steps, plan_hash: o.get("plan_hash")?.clone(), seq: opt_int(o, "seq")?,
                revisions: int(o, "revisions")? })
}

pub fn goal(text: &str) -> Option<Goal> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let history = o.get("history")?.as_array()?.iter().map(|h| {
        let p = h.as_array()?;
        if p.len() != 2 {
            return None;
        }
        Some((as_int(&p[0])?, p[1].as_str()?.to_string()))
    }).collect::<Option<Vec<_>>>()?;
    Some(Goal { goal: opt_string(o, "goal")?, seq: opt_int(o, "seq")?, history })
}

pub fn rejections(text: &str) -> Option<Rejections> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let recent = o.get("recent")?.as_array()?.iter().map(|r| {
        obj(r)?;
        Some(Arc::from(dumps(r)))
    }).collect::<Option<VecDeque<_>>>()?;
    Some(Rejections { total: int(o, "total")?, by_verdict: counts(o.get("by_verdict")?)?,
                      recent })
}

/// The watermarks of a stored `meta` (quarantine must be null: a quarantined session
/// is the Python processor's).
pub struct Meta {
    pub as_of_offset: i64,
    pub as_of_seq: i64,
    pub counts: BTreeMap<String, i64>,
    pub first_offset: Option<i64>,
    pub last_time: Option<i64>,
    pub partition: i64,
}

pub fn meta(text: &str, session_id: &str) -> Option<Meta> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    if !o.get("quarantine")?.is_null() || string(o, "session_id")? != session_id {
        return None;
    }
    Some(Meta {
        as_of_offset: int(o, "as_of_offset")?,
        as_of_seq: int(o, "as_of_seq")?,
        counts: counts(o.get("counts")?)?,
        first_offset: opt_int(o, "first_offset")?,
        last_time: opt_int(o, "last_time")?,
        partition: int(o, "partition")?,
    })
}

// -- the units of units_more.rs --------------------------------------------------------------

use crate::units_more::{Attempt, Business, Call, Compaction, More, ResultRow, Todo, TodoItem,
                        Tools};

fn texts(v: &Value) -> Option<Vec<Arc<str>>> {
    v.as_array()?.iter().map(|x| obj(x).map(|_| Arc::from(dumps(x)))).collect()
}

fn call(v: &Value) -> Option<Call> {
    let o = obj(v)?;
    Some(Call {
        call_id: string(o, "call_id")?,
        name: o.get("name")?.clone(),
        declared_seq: opt_int(o, "declared_seq")?,
        call_seq: opt_int(o, "call_seq")?,
        idempotency_key: o.get("idempotency_key")?.clone(),
        turn_id: opt_string(o, "turn_id")?,
    })
}

fn calls(v: &Value) -> Option<crate::units_more::Ordered<Call>> {
    let mut out = crate::units_more::Ordered::default();
    for c in v.as_array()? {
        let c = call(c)?;
        let id = c.call_id.clone();
        out.set(&id, c);
    }
    Some(out)
}

pub fn tools(text: &str) -> Option<Tools> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let results = o.get("results")?.as_array()?.iter().map(|r| {
        let ro = obj(r)?;
        let operation_id = match ro.get("operation_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            _ => return None,
        };
        Some(Arc::new(ResultRow { call_id: string(ro, "call_id")?, operation_id,
                                  text: dumps(r) }))
    }).collect::<Option<Vec<_>>>()?;
    Some(Tools { declared: calls(o.get("declared")?)?, open: calls(o.get("open")?)?, results,
                 abandoned: texts(o.get("abandoned")?)?, counts: counts(o.get("counts")?)? })
}

pub fn todo(text: &str) -> Option<Todo> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let mut t = Todo { unknown_updates: int(o, "unknown_updates")?, ..Todo::default() };
    for item in o.get("items")?.as_array()? {
        let io = obj(item)?;
        let it = TodoItem { id: string(io, "id")?, text: io.get("text")?.clone(),
                            status: string(io, "status")?, added_seq: int(io, "added_seq")?,
                            updated_seq: int(io, "updated_seq")? };
        t.push(it);
    }
    Some(t)
}

/// The invalidation reasons business.rs writes (static texts there).
const REASONS: [&str; 2] = ["metric changed", "filters changed"];

pub fn business(text: &str) -> Option<Business> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let mut b = Business::default();
    for inv in o.get("invalidations")?.as_array()? {
        let p = inv.as_array()?;
        if p.len() != 2 {
            return None;
        }
        let why = REASONS.into_iter().find(|r| Some(*r) == p[1].as_str())?;
        b.invalidations.push((as_int(&p[0])?, why));
    }
    let values = obj(o.get("values")?)?;
    let sources = obj(o.get("sources")?)?;
    for (i, k) in crate::units_more::BUSINESS_FIELDS.iter().enumerate() {
        b.values[i] = values.get(*k)?.clone();
        b.sources[i] = match sources.get(*k) {
            None => None,
            Some(s) => Some(as_int(s)?),
        };
    }
    Some(b)
}

fn attempt(v: &Value) -> Option<Attempt> {
    let o = obj(v)?;
    Some(Attempt {
        compaction_id: string(o, "compaction_id")?,
        trigger: o.get("trigger")?.clone(),
        start_seq: int(o, "start_seq")?,
        first_position: o.get("first_position")?.clone(),
        last_position: o.get("last_position")?.clone(),
        shadowed_seqs: o.get("shadowed_seqs")?.as_array()?.clone(),
        tokens_before: o.get("tokens_before")?.clone(),
        tokens_after: o.get("tokens_after")?.clone(),
        summarizer: o.get("summarizer")?.clone(),
        summary_seq: opt_int(o, "summary_seq")?,
        replacement_seq: opt_int(o, "replacement_seq")?,
        outcome: opt_string(o, "outcome")?,
        reason: o.get("reason")?.clone(),
        end_seq: opt_int(o, "end_seq")?,
        from_seed: o.get("from_seed")?.as_bool()?,
    })
}

pub fn compaction(text: &str) -> Option<Compaction> {
    let v: Value = serde_json::from_str(text).ok()?;
    let o = obj(&v)?;
    let open = match o.get("open")? {
        Value::Null => None,
        a => Some(attempt(a)?),
    };
    Some(Compaction { attempts: texts(o.get("attempts")?)?, open,
                      outcomes: counts(o.get("outcomes")?)? })
}

/// The four units of `More` from their state texts (tools, todo, business, compaction).
pub fn more(state: impl Fn(&str) -> Option<String>) -> Option<More> {
    Some(More { tools: tools(&state("tools")?)?, todo: todo(&state("todo")?)?,
                business: business(&state("business")?)?,
                compaction: compaction(&state("compaction")?)? })
}
