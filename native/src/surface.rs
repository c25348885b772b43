//! The `surface` unit: the model-visible message history `derive_messages()` reads.
//!
//! Mirrors `sessionstream.core.surface.Surface` driven by the `SurfaceUnit`
//! (core/projections/surface.py) exactly: the same nodes (`message_for`), the same
//! indexes (node seq -> position, call id -> assistant node, call id -> result node,
//! the unanswered calls in dict order), the same replace (`check_range`, the summary's
//! own calls not indexed) and abandon (`drop_calls`: the turn/end's seq joins the
//! rewritten node's seqs, a node left empty is dropped) rules, and the same token
//! estimate (`message_tokens`: ceil(characters of the canonical text / 4)). Each node
//! keeps its canonical JSON text (`Message.json_text()`), so the view, the state and
//! the chunk items (ADR 0013) are joins of stored texts.
//!
//! What it cannot fold exactly as the Python unit (a replace whose range is not on the
//! surface, data of a shape the Python unit raises on or keys by a non-string) is an
//! `Err`: the caller hands the session to the Python reference, which gives the verdict.

use foldhash::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;

use crate::chunks::Part;
use crate::json::{parse_checked, write_int, write_str, write_value};
use crate::units::Ev;

/// Turn end reasons that abandon unanswered tool calls (core.surface.ABANDONING_REASONS).
const ABANDONING: [&str; 3] = ["failed", "cancelled", "interrupted"];
const SURFACE_NONE: u8 = 0;
const SURFACE_REPLACE: u8 = 2;

/// Role of a message kind (core.messages.Kind -> Role as `message_for` pairs them).
const KINDS: [(&str, &str); 5] = [("user", "user"), ("summary", "user"), ("context", "user"),
                                  ("assistant", "assistant"), ("tool_result", "tool")];
const ROLES: [&str; 3] = ["user", "assistant", "tool"];

/// One tool call of an assistant node: its id and its canonical text.
#[derive(Clone, Debug)]
pub struct Call {
    pub call_id: String,
    pub text: String,
}

/// One message on the surface (core.messages.Message), with its canonical text.
#[derive(Debug)]
pub struct Node {
    pub role: &'static str,
    pub kind: &'static str,
    /// canonical JSON of the content
    pub content: String,
    pub seqs: Vec<i64>,
    pub calls: Vec<Call>,
    /// tool results only: the call id and the canonical JSON of the status
    pub result: Option<(String, String)>,
    /// `Message.json_text()`
    pub text: String,
    /// `message_tokens`
    pub tokens: i64,
}

impl Node {
    fn new(role: &'static str, kind: &'static str, content: String, seqs: Vec<i64>,
           calls: Vec<Call>, result: Option<(String, String)>) -> Node {
        let mut o = String::with_capacity(content.len() + 64
                                          + calls.iter().map(|c| c.text.len() + 1).sum::<usize>());
        o.push('{');
        if let Some((cid, _)) = &result {
            o.push_str("\"call_id\":");
            write_str(&mut o, cid);
            o.push(',');
        }
        o.push_str("\"content\":");
        o.push_str(&content);
        o.push_str(",\"kind\":");
        write_str(&mut o, kind);
        o.push_str(",\"role\":");
        write_str(&mut o, role);
        o.push_str(",\"seqs\":[");
        for (i, s) in seqs.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            write_int(&mut o, *s);
        }
        o.push(']');
        if let Some((_, status)) = &result {
            o.push_str(",\"status\":");
            o.push_str(status);
        }
        if !calls.is_empty() {
            o.push_str(",\"tool_calls\":[");
            for (i, c) in calls.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                o.push_str(&c.text);
            }
            o.push(']');
        }
        o.push('}');
        let chars = o.chars().count() as i64;
        Node { role, kind, content, seqs, calls, result, text: o, tokens: (chars + 3) / 4 }
    }

    fn seq(&self) -> i64 {
        self.seqs[0]
    }

    /// `_is_empty(content)`: None, "" or an empty list / object.
    fn content_empty(&self) -> bool {
        matches!(self.content.as_str(), "null" | "\"\"" | "[]" | "{}")
    }
}

fn canonical(v: &Value) -> String {
    let mut o = String::new();
    write_value(&mut o, v);
    o
}

fn call_text(call_id: &str, name: &Value, arguments: &Value) -> String {
    let mut o = String::from("{\"arguments\":");
    write_value(&mut o, arguments);
    o.push_str(",\"call_id\":");
    write_str(&mut o, call_id);
    o.push_str(",\"name\":");
    write_value(&mut o, name);
    o.push('}');
    o
}

/// The tool calls of an assistant message's data, as `message_for` iterates them
/// (`data.get("tool_calls", ())`); None: Python would raise or key by a non-string.
fn calls_of(d: &serde_json::Map<String, Value>) -> Option<Vec<Call>> {
    match d.get("tool_calls") {
        None => Some(Vec::new()),
        Some(Value::Array(calls)) => calls.iter().map(|c| {
            let c = c.as_object()?;
            let cid = c.get("call_id")?.as_str()?;
            Some(Call { call_id: cid.to_string(),
                        text: call_text(cid, c.get("name")?, c.get("arguments")?) })
        }).collect(),
        // iterating an empty object or string gives nothing; anything else raises
        Some(Value::Object(m)) if m.is_empty() => Some(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Some(Vec::new()),
        Some(_) => None,
    }
}

/// Whether the surface unit folds `ev` exactly as the Python one would.
pub fn prescan(ev: &Ev) -> bool {
    let t = ev.etype.as_str();
    if !matches!(t, "user/message" | "context/snapshot" | "memory/recall" | "assistant/message"
        | "tool/result")
        || ev.surface_op == SURFACE_NONE {
        return true; // turn/end's reason: units::prescan
    }
    message_for(ev).is_some()
}

/// `message_for(event)`: the node an event creates. None: not a shape it folds.
fn message_for(ev: &Ev) -> Option<Node> {
    let d = ev.data.as_object()?;
    let seqs = vec![ev.seq];
    match ev.etype.as_str() {
        "user/message" => {
            let kind = if ev.surface_op == SURFACE_REPLACE { "summary" } else { "user" };
            Some(Node::new("user", kind, canonical(d.get("content")?), seqs, Vec::new(), None))
        }
        "assistant/message" => {
            let calls = calls_of(d)?;
            Some(Node::new("assistant", "assistant", canonical(d.get("content")?), seqs, calls,
                           None))
        }
        "tool/result" => {
            let content = if let Some(c) = d.get("content") {
                canonical(c)
            } else if let Some(a) = d.get("attachment") {
                let mut o = String::from("{\"attachment\":");
                write_value(&mut o, a);
                o.push('}');
                o
            } else {
                "null".to_string()
            };
            let cid = d.get("call_id")?.as_str()?.to_string();
            let status = canonical(d.get("status")?);
            Some(Node::new("tool", "tool_result", content, seqs, Vec::new(), Some((cid, status))))
        }
        // a memory shown to the model (docs/adr/0030): a context message like a snapshot
        "context/snapshot" | "memory/recall" => {
            Some(Node::new("user", "context", canonical(d.get("content")?), seqs, Vec::new(), None))
        }
        _ => None,
    }
}

/// The surface of one session (core.surface.Surface) plus the unit's token total.
#[derive(Clone, Debug, Default)]
pub struct Surface {
    pub nodes: Vec<Arc<Node>>,
    pos: HashMap<i64, usize>,
    call_node: HashMap<String, i64>,
    result_node: HashMap<String, i64>,
    /// calls on the surface with no result yet, in dict order
    unanswered: Vec<String>,
    pub tokens: i64,
    /// The lowest position changed since the last chunked write (chunks.rs).
    pub dirty_from: usize,
    /// While a batch may still be undone (crate::undo): how to put it back.
    undo: Option<Box<Undo>>,
}

/// How to undo a batch's changes to a surface: appends are journaled (the node count
/// before, the index entries they replaced); before the batch's first replace or
/// abandon (rare), the surface as it was is kept whole.
#[derive(Clone, Debug)]
struct Undo {
    nodes: usize,
    unanswered: Vec<String>,
    tokens: i64,
    dirty_from: usize,
    pos: Vec<(i64, Option<usize>)>,
    call_node: Vec<(String, Option<i64>)>,
    result_node: Vec<(String, Option<i64>)>,
    whole: Option<Surface>,
}

/// The Python unit would raise (or the fold would differ): hand the session over.
#[derive(Debug, PartialEq)]
pub struct Refuse;

impl Surface {
    /// Fold one admitted, known event; whether the unit's state changed.
    pub fn apply(&mut self, ev: &Ev) -> Result<bool, Refuse> {
        let t = ev.etype.as_str();
        if t == "turn/end" {
            let reason = ev.data.get("reason").and_then(Value::as_str).ok_or(Refuse)?;
            if !ABANDONING.contains(&reason) || self.unanswered.is_empty() {
                return Ok(false);
            }
            let ids = self.unanswered.clone();
            return self.drop_calls(&ids, ev.seq);
        }
        if !matches!(t, "user/message" | "context/snapshot" | "memory/recall" | "assistant/message"
        | "tool/result")
            || ev.surface_op == SURFACE_NONE {
            return Ok(false);
        }
        let node = message_for(ev).ok_or(Refuse)?;
        if ev.surface_op == SURFACE_REPLACE {
            self.check_range(&ev.source_event_seqs)?;
            self.replace(&ev.source_event_seqs, node);
        } else {
            self.append(node);
        }
        Ok(true)
    }

    fn unanswered_remove(&mut self, cid: &str) {
        if let Some(i) = self.unanswered.iter().position(|c| c == cid) {
            self.unanswered.remove(i);
        }
    }

    /// `Surface.append`.
    fn append(&mut self, node: Node) {
        let seq = node.seq();
        let old = self.pos.insert(seq, self.nodes.len());
        let mut u = self.undo.as_mut().filter(|u| u.whole.is_none());
        if let Some(u) = u.as_mut() {
            u.pos.push((seq, old));
        }
        for c in &node.calls {
            let old = self.call_node.insert(c.call_id.clone(), seq);
            if let Some(u) = u.as_mut() {
                u.call_node.push((c.call_id.clone(), old));
            }
            if !self.unanswered.contains(&c.call_id) {
                self.unanswered.push(c.call_id.clone());
            }
        }
        if let Some((cid, _)) = &node.result {
            let old = self.result_node.insert(cid.clone(), seq);
            if let Some(u) = u.as_mut() {
                u.result_node.push((cid.clone(), old));
            }
            let cid = cid.clone();
            self.unanswered_remove(&cid);
        }
        self.tokens += node.tokens;
        self.nodes.push(Arc::new(node));
    }

    /// `Surface.check_range`: Ok when `seqs` can be shadowed.
    fn check_range(&self, seqs: &[i64]) -> Result<(), Refuse> {
        let first = *self.pos.get(seqs.first().ok_or(Refuse)?).ok_or(Refuse)?;
        if first + seqs.len() > self.nodes.len() {
            return Err(Refuse);
        }
        for (i, seq) in seqs.iter().enumerate() {
            if self.nodes[first + i].seq() != *seq {
                return Err(Refuse);
            }
        }
        let inside: HashSet<i64> = seqs.iter().copied().collect();
        for seq in seqs {
            let node = &self.nodes[*self.pos.get(seq).ok_or(Refuse)?];
            for c in &node.calls {
                match self.result_node.get(&c.call_id) {
                    Some(r) if inside.contains(r) => {}
                    _ => return Err(Refuse),
                }
            }
            if let Some((cid, _)) = &node.result {
                if let Some(owner) = self.call_node.get(cid) {
                    if !inside.contains(owner) {
                        return Err(Refuse);
                    }
                }
            }
        }
        Ok(())
    }

    /// `Surface.replace` (range checked).
    fn replace(&mut self, seqs: &[i64], summary: Node) {
        self.keep_whole();
        let first = self.pos[&seqs[0]];
        self.dirty_from = self.dirty_from.min(first);
        let removed: Vec<Arc<Node>> = self.nodes.splice(first..first + seqs.len(),
                                                        [Arc::new(summary)]).collect();
        for node in &removed {
            for c in &node.calls {
                self.call_node.remove(&c.call_id);
                self.unanswered_remove(&c.call_id);
            }
            if let Some((cid, _)) = &node.result {
                self.result_node.remove(cid);
            }
            self.pos.remove(&node.seq());
            self.tokens -= node.tokens;
        }
        self.tokens += self.nodes[first].tokens;
        self.reindex(first);
    }

    /// `Surface.drop_calls`: whether anything changed.
    fn drop_calls(&mut self, ids: &[String], cause_seq: i64) -> Result<bool, Refuse> {
        self.keep_whole();
        let mut by_node: Vec<(i64, HashSet<String>)> = Vec::new();
        for cid in ids {
            self.unanswered_remove(cid);
            if let Some(owner) = self.call_node.remove(cid) {
                match by_node.iter_mut().find(|(o, _)| *o == owner) {
                    Some((_, set)) => {
                        set.insert(cid.clone());
                    }
                    None => by_node.push((owner, HashSet::from_iter([cid.clone()]))),
                }
            }
        }
        if by_node.is_empty() {
            return Ok(false);
        }
        let mut low = usize::MAX;
        for (owner, _) in &by_node {
            low = low.min(*self.pos.get(owner).ok_or(Refuse)?);
        }
        self.dirty_from = self.dirty_from.min(low);
        let mut lowest = self.nodes.len();
        let mut dropped = false;
        for (owner, gone) in &by_node {
            let at = self.pos[owner];
            let node = self.nodes[at].clone();
            self.tokens -= node.tokens;
            let calls: Vec<Call> = node.calls.iter()
                .filter(|c| !gone.contains(&c.call_id)).cloned().collect();
            if calls.is_empty() && node.content_empty() {
                self.pos.remove(owner);
                self.nodes[at] = dropped_node();
                dropped = true;
                lowest = lowest.min(at);
            } else {
                let mut seqs = node.seqs.clone();
                seqs.push(cause_seq);
                let kept = Node::new(node.role, node.kind, node.content.clone(), seqs, calls, None);
                self.tokens += kept.tokens;
                self.nodes[at] = Arc::new(kept);
            }
        }
        if dropped {
            self.nodes.retain(|n| !n.seqs.is_empty());
            self.reindex(lowest);
        }
        Ok(true)
    }

    fn reindex(&mut self, start: usize) {
        for i in start..self.nodes.len() {
            self.pos.insert(self.nodes[i].seq(), i);
        }
    }

    fn write_messages(&self, o: &mut String) {
        o.push('[');
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                o.push(',');
            }
            o.push_str(&n.text);
        }
        o.push(']');
    }

    /// `{"count","messages","token_estimate"}`
    pub fn view(&self) -> String {
        let mut o = String::with_capacity(64 + self.nodes.iter().map(|n| n.text.len() + 1)
                                          .sum::<usize>());
        o.push_str("{\"count\":");
        write_int(&mut o, self.nodes.len() as i64);
        o.push_str(",\"messages\":");
        self.write_messages(&mut o);
        o.push_str(",\"token_estimate\":");
        write_int(&mut o, self.tokens);
        o.push('}');
        o
    }

    /// `{"messages"}`
    pub fn dump(&self) -> String {
        let mut o = String::with_capacity(16 + self.nodes.iter().map(|n| n.text.len() + 1)
                                          .sum::<usize>());
        o.push_str("{\"messages\":");
        self.write_messages(&mut o);
        o.push('}');
        o
    }

    /// Heads and parts of the chunked unit (ADR 0013): view `{"count","token_estimate"}`,
    /// state `{}`, the `messages` collection (one for both) from the chunk of the first
    /// position changed since the last call.
    pub fn chunked(&mut self, chunk: usize) -> (String, String, Vec<Part>) {
        let mut view = String::from("{\"count\":");
        write_int(&mut view, self.nodes.len() as i64);
        view.push_str(",\"token_estimate\":");
        write_int(&mut view, self.tokens);
        view.push('}');
        let n = self.nodes.len();
        let chunk = chunk.max(1);
        let start = (self.dirty_from.min(n) / chunk) * chunk;
        let texts = self.nodes[start..].iter().map(|x| x.text.clone()).collect();
        self.dirty_from = n;
        (view, "{}".to_string(), vec![("messages", n, start, texts)])
    }

    /// `SurfaceUnit.load(dump)`: `Surface.from_messages` of the stored messages; None
    /// when a message is not one `Message.from_json` reads back the same (the caller
    /// also checks the state re-dumps to the stored text).
    pub fn load(text: &str) -> Option<Surface> {
        let v = parse_checked(text)?;
        let messages = v.as_object()?.get("messages")?.as_array()?;
        let mut s = Surface::default();
        for m in messages {
            let m = m.as_object()?;
            let kind_text = m.get("kind")?.as_str()?;
            let kind = KINDS.iter().find(|(k, _)| *k == kind_text)?;
            let role_text = m.get("role")?.as_str()?;
            let role = *ROLES.iter().find(|r| **r == role_text)?;
            let seqs: Vec<i64> = m.get("seqs")?.as_array()?.iter()
                .map(Value::as_i64).collect::<Option<_>>()?;
            if seqs.is_empty() {
                return None;
            }
            let calls = match m.get("tool_calls") {
                None => Vec::new(),
                Some(Value::Array(calls)) => calls.iter().map(|c| {
                    let c = c.as_object()?;
                    let cid = c.get("call_id")?.as_str()?;
                    Some(Call { call_id: cid.to_string(),
                                text: call_text(cid, c.get("name")?, c.get("arguments")?) })
                }).collect::<Option<_>>()?,
                Some(_) => return None,
            };
            let result = match m.get("call_id") {
                None | Some(Value::Null) => None,
                Some(Value::String(cid)) => Some((cid.clone(),
                                                  canonical(m.get("status").unwrap_or(&Value::Null)))),
                Some(_) => return None,
            };
            s.append(Node::new(role, kind.0, canonical(m.get("content")?), seqs, calls, result));
        }
        Some(s)
    }
}

/// Undo of one batch (crate::undo).
impl Surface {
    /// Start journaling: the batch folded from here on can be undone by `undo`.
    pub fn checkpoint(&mut self) {
        self.undo = Some(Box::new(Undo {
            nodes: self.nodes.len(), unanswered: self.unanswered.clone(), tokens: self.tokens,
            dirty_from: self.dirty_from, pos: Vec::new(), call_node: Vec::new(),
            result_node: Vec::new(), whole: None,
        }));
    }

    /// Stop journaling (the batch can no longer be undone).
    pub fn settle(&mut self) {
        self.undo = None;
    }

    /// Put the surface back as it was at `checkpoint` (and stop journaling).
    pub fn undo(&mut self) {
        let Some(u) = self.undo.take() else { return };
        let u = *u;
        if let Some(whole) = u.whole {
            *self = whole;
            return;
        }
        self.rewind(u);
    }

    /// Undo the journaled appends (the only changes before `keep_whole`).
    fn rewind(&mut self, u: Undo) {
        fn back<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>, log: Vec<(K, Option<V>)>) {
            for (k, old) in log.into_iter().rev() {
                match old {
                    Some(v) => {
                        map.insert(k, v);
                    }
                    None => {
                        map.remove(&k);
                    }
                }
            }
        }
        back(&mut self.pos, u.pos);
        back(&mut self.call_node, u.call_node);
        back(&mut self.result_node, u.result_node);
        self.nodes.truncate(u.nodes);
        self.unanswered = u.unanswered;
        self.tokens = u.tokens;
        self.dirty_from = u.dirty_from;
    }

    /// Before a change that is not an append: keep the surface as it was at the
    /// checkpoint whole (once per batch; the journal of the appends so far rewinds a copy).
    fn keep_whole(&mut self) {
        let Some(u) = self.undo.as_mut() else { return };
        if u.whole.is_some() {
            return;
        }
        let journal = Undo { whole: None, ..(**u).clone() };
        let mut copy = self.clone_without_undo();
        copy.rewind(journal);
        if let Some(u) = self.undo.as_mut() {
            u.whole = Some(copy);
        }
    }

    fn clone_without_undo(&self) -> Surface {
        Surface {
            nodes: self.nodes.clone(), pos: self.pos.clone(), call_node: self.call_node.clone(),
            result_node: self.result_node.clone(), unanswered: self.unanswered.clone(),
            tokens: self.tokens, dirty_from: self.dirty_from, undo: None,
        }
    }
}

/// A placeholder for a dropped node while `drop_calls` rewrites the list (no seqs).
fn dropped_node() -> Arc<Node> {
    Arc::new(Node { role: "assistant", kind: "assistant", content: String::new(), seqs: Vec::new(),
                    calls: Vec::new(), result: None, text: String::new(), tokens: 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(etype: &str, seq: i64, op: u8, data: &str) -> Ev {
        Ev {
            session_id: "s".into(), seq, event_id: format!("e{seq}"), time: seq,
            etype: etype.into(), data: parse_checked(data).unwrap(), writer_id: "w".into(),
            writer_epoch: 1, ignorable: false, turn_id: Some("t1".into()), step_id: None,
            format_version: 1, prev_event_id: None, surface_op: op,
            source_event_seqs: Vec::new(), py: None,
        }
    }

    #[test]
    fn messages_are_the_canonical_texts_of_message_to_json() {
        let mut s = Surface::default();
        assert_eq!(s.apply(&ev("user/message", 0, 1, "{\"content\":\"hé\"}")), Ok(true));
        assert_eq!(s.apply(&ev("assistant/message", 1, 1, concat!(
            "{\"content\":[],\"tool_calls\":[{\"call_id\":\"c1\",\"name\":\"ls\",",
            "\"arguments\":{\"b\":1,\"a\":2.0}}]}"))), Ok(true));
        assert_eq!(s.apply(&ev("tool/result", 2, 1,
                               "{\"call_id\":\"c1\",\"status\":\"ok\",\"attachment\":{\"x\":1}}")),
                   Ok(true));
        assert_eq!(s.apply(&ev("turn/end", 3, 0, "{\"reason\":\"failed\"}")), Ok(false));
        assert_eq!(s.dump(), concat!(
            "{\"messages\":[{\"content\":\"hé\",\"kind\":\"user\",\"role\":\"user\",\"seqs\":[0]},",
            "{\"content\":[],\"kind\":\"assistant\",\"role\":\"assistant\",\"seqs\":[1],",
            "\"tool_calls\":[{\"arguments\":{\"a\":2.0,\"b\":1},\"call_id\":\"c1\",\"name\":\"ls\"}]},",
            "{\"call_id\":\"c1\",\"content\":{\"attachment\":{\"x\":1}},\"kind\":\"tool_result\",",
            "\"role\":\"tool\",\"seqs\":[2],\"status\":\"ok\"}]}"));
        // ceil(chars / 4): "hé" is one character per letter, as Python's len counts
        assert_eq!(s.nodes[0].tokens, (s.nodes[0].text.chars().count() as i64 + 3) / 4);
        assert_eq!(s.tokens, s.nodes.iter().map(|n| n.tokens).sum::<i64>());
        let loaded = Surface::load(&s.dump()).unwrap();
        assert_eq!((loaded.dump(), loaded.tokens), (s.dump(), s.tokens));
    }

    #[test]
    fn an_abandoning_turn_end_drops_open_calls_and_empty_nodes() {
        let mut s = Surface::default();
        s.apply(&ev("assistant/message", 0, 1,
                    "{\"content\":\"\",\"tool_calls\":[{\"call_id\":\"a\",\"name\":\"x\",\"arguments\":1}]}"))
            .unwrap();
        s.apply(&ev("assistant/message", 1, 1, concat!(
            "{\"content\":\"k\",\"tool_calls\":[{\"call_id\":\"b\",\"name\":\"x\",\"arguments\":1},",
            "{\"call_id\":\"c\",\"name\":\"y\",\"arguments\":2}]}"))).unwrap();
        s.apply(&ev("tool/result", 2, 1, "{\"call_id\":\"c\",\"status\":\"ok\",\"content\":1}"))
            .unwrap();
        s.dirty_from = 3;
        assert_eq!(s.apply(&ev("turn/end", 3, 0, "{\"reason\":\"cancelled\"}")), Ok(true));
        assert_eq!(s.nodes.len(), 2);
        assert_eq!(s.nodes[0].seqs, vec![1, 3]);
        assert!(s.nodes[0].text.ends_with(
            "\"seqs\":[1,3],\"tool_calls\":[{\"arguments\":2,\"call_id\":\"c\",\"name\":\"y\"}]}"));
        assert_eq!(s.dirty_from, 0);
        assert_eq!(s.pos[&2], 1);
        assert_eq!(s.apply(&ev("turn/end", 4, 0, "{\"reason\":\"failed\"}")), Ok(false));
    }

    #[test]
    fn a_replace_shadows_a_checked_run_and_refuses_a_split_call() {
        let mut s = Surface::default();
        s.apply(&ev("user/message", 0, 1, "{\"content\":\"a\"}")).unwrap();
        s.apply(&ev("assistant/message", 1, 1,
                    "{\"content\":\"\",\"tool_calls\":[{\"call_id\":\"a\",\"name\":\"x\",\"arguments\":1}]}"))
            .unwrap();
        s.apply(&ev("tool/result", 2, 1, "{\"call_id\":\"a\",\"status\":\"ok\"}")).unwrap();
        s.apply(&ev("user/message", 3, 1, "{\"content\":\"b\"}")).unwrap();
        let mut bad = ev("user/message", 4, 2, "{\"content\":\"sum\"}");
        bad.source_event_seqs = vec![0, 1];
        assert_eq!(s.apply(&bad), Err(Refuse)); // the call's result is not shadowed
        bad.source_event_seqs = vec![1, 3];
        assert_eq!(s.apply(&bad), Err(Refuse)); // not contiguous
        bad.source_event_seqs = vec![];
        assert_eq!(s.apply(&bad), Err(Refuse));
        let mut good = ev("user/message", 5, 2, "{\"content\":\"sum\"}");
        good.source_event_seqs = vec![0, 1, 2];
        s.dirty_from = 4;
        assert_eq!(s.apply(&good), Ok(true));
        assert_eq!(s.nodes.iter().map(|n| n.seqs[0]).collect::<Vec<_>>(), vec![5, 3]);
        assert!(s.nodes[0].text.contains("\"kind\":\"summary\""));
        assert_eq!(s.tokens, s.nodes.iter().map(|n| n.tokens).sum::<i64>());
        let (view, state, parts) = s.chunked(16);
        assert_eq!(state, "{}");
        assert_eq!(view, format!("{{\"count\":2,\"token_estimate\":{}}}", s.tokens));
        assert_eq!((parts[0].1, parts[0].2, parts[0].3.len()), (2, 0, 2));
        let again = s.chunked(1).2.remove(0); // nothing changed since: no items
        assert_eq!((again.2, again.3.len()), (2, 0));
    }

    #[test]
    fn prescan_refuses_the_shapes_message_for_raises_on() {
        assert!(prescan(&ev("user/message", 0, 0, "[]"))); // no surface op: never read
        assert!(!prescan(&ev("user/message", 0, 1, "{}")));
        assert!(!prescan(&ev("assistant/message", 0, 1, "{\"content\":1,\"tool_calls\":null}")));
        assert!(prescan(&ev("assistant/message", 0, 1, "{\"content\":1,\"tool_calls\":{}}")));
        assert!(!prescan(&ev("assistant/message", 0, 1,
                             "{\"content\":1,\"tool_calls\":[{\"call_id\":\"c\",\"name\":1}]}")));
        assert!(!prescan(&ev("tool/result", 0, 1, "{\"call_id\":3,\"status\":\"ok\"}")));
        assert!(prescan(&ev("tool/result", 0, 1, "{\"call_id\":\"c\",\"status\":\"ok\"}")));
    }
}
