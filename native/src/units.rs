//! The built-in projection units folded natively, and the admission rule.
//!
//! Each mirrors its Python unit in `sessionstream.core.projections` (or
//! `sessionstream.core.admission`) exactly, down to the canonical JSON texts of its
//! view and dump; the differential test (tests/unit/test_native_fold.py) holds them
//! to it. `prescan` tells whether an event's data has the shapes these units read:
//! when it does not, the session is folded by the Python reference instead, which
//! raises the same ProjectionError it always did.

use std::collections::{BTreeMap, VecDeque};
use foldhash::{HashMap, HashMapExt};
use std::sync::Arc;

use serde_json::Value;

use crate::json::{as_int, dumps, py_repr, truthy, write_float, write_int, write_opt_int,
                  write_opt_str, write_str, write_value};

pub const REJECTIONS_RECENT: usize = 50;

// -- admission ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Admission {
    pub session_id: String,
    pub next_seq: i64,
    pub max_epoch: i64,
    pub window: i64,
    // Shared strings: a batch snapshots each session it folds (cheap clones).
    pub recent: VecDeque<(Arc<str>, i64)>,
    pub ids: HashMap<Arc<str>, i64>,
    pub last_event_id: Option<String>,
    pub linked: bool,
}

pub enum Verdict {
    Admitted,
    Duplicate,
    Rejected(&'static str, String),
}

impl Admission {
    pub fn new(session_id: &str, window: i64) -> Admission {
        Admission {
            session_id: session_id.to_string(),
            next_seq: 0,
            max_epoch: 0,
            window,
            recent: VecDeque::new(),
            ids: HashMap::new(),
            last_event_id: None,
            linked: false,
        }
    }

    pub fn admit(&mut self, event_id: &str, seq: i64, writer_id: &str, epoch: i64,
                 prev: Option<&str>) -> Verdict {
        let seen = self.ids.get(event_id).copied();
        let last = self.last_event_id.as_deref();
        let continues = prev == last
            || (prev.is_none() && !self.linked) // seq 0, or a record from before v2
            || (last.is_none() && seq > 0); // a state from before v2
        if seen.is_none() && epoch >= self.max_epoch && seq == self.next_seq && continues {
            self.last_event_id = Some(event_id.to_string());
            self.linked = prev.is_some();
            self.next_seq = seq + 1;
            self.max_epoch = self.max_epoch.max(epoch);
            let id: Arc<str> = Arc::from(event_id);
            self.recent.push_back((id.clone(), seq));
            self.ids.insert(id, seq);
            while self.recent.len() as i64 > self.window.max(0) {
                if let Some((old, _)) = self.recent.pop_front() {
                    self.ids.remove(&*old);
                }
            }
            return Verdict::Admitted;
        }
        if seen.is_some() {
            return Verdict::Duplicate;
        }
        let sid = &self.session_id;
        let w = py_repr(writer_id);
        if epoch < self.max_epoch {
            return Verdict::Rejected("stale_epoch", format!(
                "session {sid} seq {seq}: writer {w} epoch {epoch} is below the admitted \
                 epoch {} (zombie writer); rejected", self.max_epoch));
        }
        let next = self.next_seq;
        if seq > next {
            return Verdict::Rejected("seq_gap", format!(
                "session {sid} seq {seq}: expected seq {next}, seqs {next}..{} are missing \
                 (writer {w} epoch {epoch}); rejected", seq - 1));
        }
        if seq < next {
            return Verdict::Rejected("seq_conflict", format!(
                "session {sid} seq {seq}: seq {seq} is already taken (next is {next}) and event \
                 {event_id} is not the admitted one (writer {w} epoch {epoch}); rejected"));
        }
        let claim = match prev {
            None => "no previous event".to_string(),
            Some(p) => format!("event {p}"),
        };
        let admitted = match last {
            Some(l) if !l.is_empty() => l,
            _ => "none",
        };
        Verdict::Rejected("history_conflict", format!(
            "session {sid} seq {seq}: continues a history that was not admitted \u{2014} it was \
             written after {claim}, but the admitted event at seq {} is {admitted} (writer {w} \
             epoch {epoch}); rejected", seq - 1))
    }

    pub fn text(&self) -> String {
        let mut o = String::with_capacity(96 + self.recent.len() * 48);
        o.push_str("{\"last_event_id\":");
        write_opt_str(&mut o, self.last_event_id.as_deref());
        o.push_str(",\"linked\":");
        o.push_str(if self.linked { "true" } else { "false" });
        o.push_str(",\"max_epoch\":");
        write_int(&mut o, self.max_epoch);
        o.push_str(",\"next_seq\":");
        write_int(&mut o, self.next_seq);
        o.push_str(",\"recent\":[");
        for (i, (eid, seq)) in self.recent.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push('[');
            write_str(&mut o, eid);
            o.push(',');
            write_int(&mut o, *seq);
            o.push(']');
        }
        o.push_str("],\"session_id\":");
        write_str(&mut o, &self.session_id);
        o.push_str(",\"window\":");
        write_int(&mut o, self.window);
        o.push('}');
        o
    }
}

// -- index ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Index {
    pub session_id: Option<String>,
    pub tenant: Value,
    pub lineage: Value,
    pub status: String,
    pub status_reason: Option<String>,
    pub status_seq: Option<i64>,
    pub event_count: i64,
    pub last_seq: i64,
    pub first_time: Option<i64>,
    pub last_time: Option<i64>,
    pub last_type: Option<String>,
    pub open_turn: Option<String>,
    pub turns: i64,
    pub seeds: i64,
}

impl Index {
    pub fn new() -> Index {
        Index {
            session_id: None, tenant: Value::Null, lineage: Value::Null,
            status: "active".into(), status_reason: None, status_seq: None, event_count: 0,
            last_seq: -1, first_time: None, last_time: None, last_type: None, open_turn: None,
            turns: 0, seeds: 0,
        }
    }

    pub fn apply(&mut self, ev: &Ev) {
        match ev.etype.as_str() {
            "session/start" => {
                let data = ev.data.as_object();
                self.tenant = data.and_then(|d| d.get("tenant")).cloned().unwrap_or(Value::Null);
                self.lineage = data.and_then(|d| d.get("lineage")).cloned().unwrap_or(Value::Null);
            }
            "turn/start" => {
                self.open_turn = Some(match &ev.turn_id {
                    Some(t) if !t.is_empty() => t.clone(),
                    _ => format!("turn@{}", ev.seq),
                });
                self.turns += 1;
            }
            "turn/end" => self.open_turn = None,
            "session/end-seed" => self.seeds += 1,
            "session/end" if self.status == "active" => {
                self.status = "ended".into();
                self.status_reason = Some("session/end".into());
                self.status_seq = Some(ev.seq);
            }
            _ => {}
        }
        self.session_id = Some(ev.session_id.clone());
        self.event_count += 1;
        self.last_seq = ev.seq;
        if self.first_time.is_none() {
            self.first_time = Some(ev.time);
        }
        self.last_time = Some(ev.time);
        self.last_type = Some(ev.etype.clone());
    }

    pub fn text(&self) -> String {
        let mut o = String::with_capacity(256);
        o.push_str("{\"event_count\":");
        write_int(&mut o, self.event_count);
        o.push_str(",\"first_time\":");
        write_opt_int(&mut o, self.first_time);
        o.push_str(",\"last_seq\":");
        write_int(&mut o, self.last_seq);
        o.push_str(",\"last_time\":");
        write_opt_int(&mut o, self.last_time);
        o.push_str(",\"last_type\":");
        write_opt_str(&mut o, self.last_type.as_deref());
        o.push_str(",\"lineage\":");
        write_value(&mut o, &self.lineage);
        o.push_str(",\"open_turn\":");
        write_opt_str(&mut o, self.open_turn.as_deref());
        o.push_str(",\"seeds\":");
        write_int(&mut o, self.seeds);
        o.push_str(",\"session_id\":");
        write_opt_str(&mut o, self.session_id.as_deref());
        o.push_str(",\"status\":");
        write_str(&mut o, &self.status);
        o.push_str(",\"status_reason\":");
        write_opt_str(&mut o, self.status_reason.as_deref());
        o.push_str(",\"status_seq\":");
        write_opt_int(&mut o, self.status_seq);
        o.push_str(",\"tenant\":");
        write_value(&mut o, &self.tenant);
        o.push_str(",\"turns\":");
        write_int(&mut o, self.turns);
        o.push('}');
        o
    }
}

// -- turns ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Turn {
    pub turn_id: String,
    pub status: String,
    pub start_seq: i64,
    pub end_seq: Option<i64>,
    pub detail: Value,
    pub steps: i64,
}

impl Turn {
    pub(crate) fn write(&self, o: &mut String) {
        o.push_str("{\"detail\":");
        write_value(o, &self.detail);
        o.push_str(",\"end_seq\":");
        write_opt_int(o, self.end_seq);
        o.push_str(",\"start_seq\":");
        write_int(o, self.start_seq);
        o.push_str(",\"status\":");
        write_str(o, &self.status);
        o.push_str(",\"steps\":");
        write_int(o, self.steps);
        o.push_str(",\"turn_id\":");
        write_str(o, &self.turn_id);
        o.push('}');
    }
}

#[derive(Clone, Debug, Default)]
pub struct Turns {
    pub closed: Vec<Arc<Turn>>,
    pub open: Option<Turn>,
    pub open_step: Option<String>,
    pub open_step_seq: Option<i64>,
    pub counts: BTreeMap<String, i64>,
}

impl Turns {
    fn close(&mut self, reason: &str, seq: i64, detail: Value) {
        if let Some(o) = self.open.take() {
            self.closed.push(Arc::new(Turn { status: reason.to_string(), end_seq: Some(seq), detail, ..o }));
            *self.counts.entry(reason.to_string()).or_insert(0) += 1;
        }
        self.open_step = None;
        self.open_step_seq = None;
    }

    /// Whether the state changed.
    pub fn apply(&mut self, ev: &Ev) -> bool {
        match ev.etype.as_str() {
            "turn/start" => {
                if self.open.is_some() {
                    self.close("interrupted", ev.seq, Value::String("turn/start while open".into()));
                }
                let id = ev.turn_id.clone().unwrap_or_else(|| format!("turn@{}", ev.seq));
                self.open = Some(Turn { turn_id: id, status: "open".into(), start_seq: ev.seq,
                                        end_seq: None, detail: Value::Null, steps: 0 });
                self.open_step = None;
                self.open_step_seq = None;
                true
            }
            "turn/end" => {
                if self.open.is_none() {
                    return false;
                }
                let d = ev.data.as_object();
                let reason = d.and_then(|d| d.get("reason")).and_then(|r| r.as_str())
                    .unwrap_or("").to_string();
                let detail = d.and_then(|d| d.get("detail")).cloned().unwrap_or(Value::Null);
                self.close(&reason, ev.seq, detail);
                true
            }
            "step/start" => {
                let Some(o) = self.open.as_mut() else { return false };
                o.steps += 1;
                self.open_step = Some(ev.step_id.clone().unwrap_or_else(|| format!("step@{}", ev.seq)));
                self.open_step_seq = Some(ev.seq);
                true
            }
            "step/end" => {
                if self.open_step.is_none() {
                    return false;
                }
                self.open_step = None;
                self.open_step_seq = None;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn write_counts(&self, o: &mut String) {
        o.push('{');
        for (i, (k, v)) in self.counts.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_str(o, k);
            o.push(':');
            write_int(o, *v);
        }
        o.push('}');
    }

    pub fn view(&self) -> String {
        let mut o = String::with_capacity(64 + self.closed.len() * 110);
        o.push_str("{\"counts\":");
        self.write_counts(&mut o);
        o.push_str(",\"open_step\":");
        write_opt_str(&mut o, self.open_step.as_deref());
        o.push_str(",\"open_turn\":");
        write_opt_str(&mut o, self.open.as_ref().map(|t| t.turn_id.as_str()));
        o.push_str(",\"total\":");
        write_int(&mut o, (self.closed.len() + self.open.is_some() as usize) as i64);
        o.push_str(",\"turns\":[");
        for (i, t) in self.closed.iter().map(|t| &**t).chain(self.open.iter()).enumerate() {
            if i > 0 {
                o.push(',');
            }
            t.write(&mut o);
        }
        o.push_str("]}");
        o
    }

    pub fn dump(&self) -> String {
        let mut o = String::with_capacity(64 + self.closed.len() * 110);
        o.push_str("{\"closed\":[");
        for (i, t) in self.closed.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            t.write(&mut o);
        }
        o.push_str("],\"counts\":");
        self.write_counts(&mut o);
        o.push_str(",\"open\":");
        match &self.open {
            Some(t) => t.write(&mut o),
            None => o.push_str("null"),
        }
        o.push_str(",\"open_step\":");
        write_opt_str(&mut o, self.open_step.as_deref());
        o.push_str(",\"open_step_seq\":");
        write_opt_int(&mut o, self.open_step_seq);
        o.push('}');
        o
    }
}

// -- usage ---------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
pub struct Usage {
    pub route: Option<(String, String)>,
    pub by_model: BTreeMap<String, [i128; 4]>,
}

impl Usage {
    fn add(&mut self, p: &str, m: &str, delta: [i128; 4]) {
        let e = self.by_model.entry(format!("{p}\u{0}{m}")).or_insert([0; 4]);
        for i in 0..4 {
            e[i] += delta[i];
        }
    }

    pub fn apply(&mut self, ev: &Ev) -> bool {
        let Some(d) = ev.data.as_object() else { return false };
        match ev.etype.as_str() {
            "request/header" => {
                let p = d.get("provider").and_then(|v| v.as_str()).unwrap_or("").to_string();
                let m = d.get("model").and_then(|v| v.as_str()).unwrap_or("").to_string();
                self.add(&p, &m, [1, 0, 0, 0]);
                self.route = Some((p, m));
                true
            }
            "assistant/message" => {
                let usage = match d.get("usage") {
                    None | Some(Value::Null) => return false,
                    Some(u) => u,
                };
                let (fp, fm) = match &self.route {
                    Some((p, m)) => (p.clone(), m.clone()),
                    None => ("unknown".to_string(), "unknown".to_string()),
                };
                let pick = |k: &str, f: String| match d.get(k) {
                    Some(v) if truthy(v) => v.as_str().unwrap_or("").to_string(),
                    _ => f,
                };
                let p = pick("provider", fp);
                let m = pick("model", fm);
                let i = usage.get("input_tokens").and_then(as_int).unwrap_or(0) as i128;
                let o = usage.get("output_tokens").and_then(as_int).unwrap_or(0) as i128;
                self.add(&p, &m, [0, 1, i, o]);
                true
            }
            _ => false,
        }
    }

    pub fn view(&self) -> String {
        let mut o = String::from("{\"by_model\":[");
        let mut total = [0i128; 4];
        for (i, (k, v)) in self.by_model.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            let (p, m) = k.split_once('\u{0}').unwrap_or((k, ""));
            o.push_str(&format!("{{\"input_tokens\":{},\"messages\":{},\"model\":", v[2], v[1]));
            write_str(&mut o, m);
            o.push_str(&format!(",\"output_tokens\":{},\"provider\":", v[3]));
            write_str(&mut o, p);
            o.push_str(&format!(",\"requests\":{}}}", v[0]));
            for j in 0..4 {
                total[j] += v[j];
            }
        }
        o.push_str(&format!(
            "],\"total\":{{\"input_tokens\":{},\"messages\":{},\"output_tokens\":{},\"requests\":{}}}}}",
            total[2], total[1], total[3], total[0]));
        o
    }

    pub fn dump(&self) -> String {
        let mut o = String::from("{\"by_model\":{");
        for (i, (k, v)) in self.by_model.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_str(&mut o, k);
            o.push_str(&format!(":[{},{},{},{}]", v[0], v[1], v[2], v[3]));
        }
        o.push_str("},\"route\":");
        match &self.route {
            Some((p, m)) => {
                o.push('[');
                write_str(&mut o, p);
                o.push(',');
                write_str(&mut o, m);
                o.push(']');
            }
            None => o.push_str("null"),
        }
        o.push('}');
        o
    }
}

// -- plan, goal ------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub steps: Option<Vec<Value>>,
    pub plan_hash: Value,
    pub seq: Option<i64>,
    pub revisions: i64,
}

impl Plan {
    pub fn apply(&mut self, ev: &Ev) -> bool {
        let d = ev.data.as_object();
        self.steps = d.and_then(|d| d.get("steps")).and_then(|s| s.as_array()).cloned();
        self.plan_hash = d.and_then(|d| d.get("plan_hash")).cloned().unwrap_or(Value::Null);
        self.seq = Some(ev.seq);
        self.revisions += 1;
        true
    }

    pub fn text(&self) -> String {
        let mut o = String::from("{\"plan_hash\":");
        write_value(&mut o, &self.plan_hash);
        o.push_str(",\"revisions\":");
        write_int(&mut o, self.revisions);
        o.push_str(",\"seq\":");
        write_opt_int(&mut o, self.seq);
        o.push_str(",\"steps\":");
        match &self.steps {
            Some(s) => write_value(&mut o, &Value::Array(s.clone())),
            None => o.push_str("null"),
        }
        o.push('}');
        o
    }
}

#[derive(Clone, Debug, Default)]
pub struct Goal {
    pub goal: Option<String>,
    pub seq: Option<i64>,
    pub history: Vec<(i64, String)>,
}

impl Goal {
    pub fn apply(&mut self, ev: &Ev) -> bool {
        let g = ev.data.as_object().and_then(|d| d.get("goal")).and_then(|g| g.as_str());
        let Some(g) = g else { return false };
        if self.goal.as_deref() == Some(g) {
            return false;
        }
        self.goal = Some(g.to_string());
        self.seq = Some(ev.seq);
        self.history.push((ev.seq, g.to_string()));
        true
    }

    pub fn view(&self) -> String {
        let mut o = String::from("{\"changes\":");
        write_int(&mut o, self.history.len() as i64);
        o.push_str(",\"goal\":");
        write_opt_str(&mut o, self.goal.as_deref());
        o.push_str(",\"seq\":");
        write_opt_int(&mut o, self.seq);
        o.push('}');
        o
    }

    pub fn dump(&self) -> String {
        let mut o = String::from("{\"goal\":");
        write_opt_str(&mut o, self.goal.as_deref());
        o.push_str(",\"history\":[");
        for (i, (s, g)) in self.history.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push('[');
            write_int(&mut o, *s);
            o.push(',');
            write_str(&mut o, g);
            o.push(']');
        }
        o.push_str("],\"seq\":");
        write_opt_int(&mut o, self.seq);
        o.push('}');
        o
    }
}

// -- rejections ------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
pub struct Rejections {
    pub total: i64,
    pub by_verdict: BTreeMap<String, i64>,
    pub recent: VecDeque<Arc<str>>, // canonical decision texts
}

impl Rejections {
    #[allow(clippy::too_many_arguments)]
    pub fn record(&mut self, verdict: &str, reason: &str, ev: &Ev, adm: &Admission, offset: i64) {
        let mut o = String::with_capacity(256);
        o.push_str("{\"event_id\":");
        write_str(&mut o, &ev.event_id);
        o.push_str(",\"max_epoch\":");
        write_int(&mut o, adm.max_epoch);
        o.push_str(",\"next_seq\":");
        write_int(&mut o, adm.next_seq);
        o.push_str(",\"offset\":");
        write_int(&mut o, offset);
        o.push_str(",\"reason\":");
        write_str(&mut o, reason);
        o.push_str(",\"seq\":");
        write_int(&mut o, ev.seq);
        o.push_str(",\"session_id\":");
        write_str(&mut o, &ev.session_id);
        o.push_str(",\"type\":");
        write_str(&mut o, &ev.etype);
        o.push_str(",\"verdict\":");
        write_str(&mut o, verdict);
        o.push_str(",\"writer\":{\"epoch\":");
        write_int(&mut o, ev.writer_epoch);
        o.push_str(",\"id\":");
        write_str(&mut o, &ev.writer_id);
        o.push_str("}}");
        self.recent.push_back(Arc::from(o));
        while self.recent.len() > REJECTIONS_RECENT {
            self.recent.pop_front();
        }
        self.total += 1;
        *self.by_verdict.entry(verdict.to_string()).or_insert(0) += 1;
    }

    pub fn text(&self) -> String {
        let mut o = String::from("{\"by_verdict\":{");
        for (i, (k, v)) in self.by_verdict.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_str(&mut o, k);
            o.push(':');
            write_int(&mut o, *v);
        }
        o.push_str("},\"recent\":[");
        for (i, r) in self.recent.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str(r);
        }
        o.push_str("],\"total\":");
        write_int(&mut o, self.total);
        o.push('}');
        o
    }
}

// -- the event the units read ------------------------------------------------------------------

/// An envelope with owned strings and its parsed data (lives while a batch folds).
pub struct Ev {
    pub session_id: String,
    pub seq: i64,
    pub event_id: String,
    pub time: i64,
    pub etype: String,
    pub data: Value,
    pub writer_id: String,
    pub writer_epoch: i64,
    pub ignorable: bool,
    pub turn_id: Option<String>,
    pub step_id: Option<String>,
    pub format_version: i64,
    pub prev_event_id: Option<String>,
    pub surface_op: u8, // SurfaceOp symbol index: 0 none, 1 append, 2 replace
    /// The shadowed seqs of a replace (the surface unit reads them).
    pub source_event_seqs: Vec<i64>,
    /// For events a Python unit reads: what the Python event is built from (the record's
    /// data text, source seqs), so it is not decoded a second time.
    pub py: Option<Box<PyParts>>,
}

/// The envelope fields only the Python units read.
pub struct PyParts {
    pub text: String,
}

fn plain_str(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::String(s)) if !s.contains('\u{0}'))
}

/// Whether the native units can fold this event exactly as the Python ones would
/// (the data has the shapes they read). False: let the Python reference fold it.
pub fn prescan(ev: &Ev) -> bool {
    let d = ev.data.as_object();
    match ev.etype.as_str() {
        "session/start" => d.is_some_and(|d| d.contains_key("tenant")),
        "turn/end" => d.is_some_and(|d| matches!(d.get("reason"), Some(Value::String(_)))),
        "request/header" => d.is_some_and(|d| plain_str(d.get("provider")) && plain_str(d.get("model"))),
        "assistant/message" => d.is_some_and(|d| {
            let route_ok = |k: &str| match d.get(k) {
                Some(v) if truthy(v) => plain_str(Some(v)),
                _ => true,
            };
            let usage_ok = match d.get("usage") {
                None | Some(Value::Null) => true,
                Some(Value::Object(u)) => {
                    u.get("input_tokens").and_then(as_int).is_some()
                        && u.get("output_tokens").and_then(as_int).is_some()
                }
                _ => false,
            };
            usage_ok && route_ok("provider") && route_ok("model")
        }),
        "plan/set" => d.is_some_and(|d| matches!(d.get("steps"), Some(Value::Array(_)))),
        "goal/set" => d.is_some_and(|d| matches!(d.get("goal"), Some(Value::String(_)))),
        _ => true,
    }
}

#[allow(dead_code)]
pub fn canonical(v: &Value) -> String {
    dumps(v)
}

#[allow(dead_code)]
pub fn float_text(f: f64) -> String {
    let mut s = String::new();
    write_float(&mut s, f);
    s
}
