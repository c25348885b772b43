//! Undo of one batch's fold of a session, at a cost independent of the session's length.
//!
//! `Folder.restore` (a Python unit failed on one of the batch's events, or a record only
//! the Python codec reads) and an aborted fold (sealed content the Python opener must
//! judge) put a session back as it was before the batch. That used to be a clone of
//! the whole state per folded session per batch: at a 100k-event session, thousands of
//! turns, tool results and todo items copied for every batch of 20 events.
//!
//! A checkpoint instead clones the session with its growing collections left out (what
//! is left is bounded: admission's window, counts, open turn and calls, the plan, the
//! business fields), and keeps those collections' lengths. Every one of them only grows
//! during a fold (`push`; todo's index only gains the ids of new items), except todo
//! items, which a batch may overwrite: `Todo::undo` journals the old item first. Undo
//! truncates each collection back to its length, puts the journaled items back, drops
//! the new items' ids from todo's index, and takes the small clone for everything else.
//! The surface journals its own appends and keeps itself whole before a batch's first
//! replace or abandon (`Surface::checkpoint`; the rare batch that rewrites the surface
//! pays one copy of it).

use foldhash::HashMap;
use std::sync::Arc;

use crate::surface::Surface;
use crate::units::Turn;
use crate::units_more::{ResultRow, TodoItem};
use crate::Sess;

/// The collections of a session that grow with its length, moved out of it.
#[derive(Default)]
struct Growing {
    turns: Vec<Arc<Turn>>,
    goals: Vec<(i64, String)>,
    results: Vec<Arc<ResultRow>>,
    abandoned: Vec<Arc<str>>,
    todo: Vec<TodoItem>,
    todo_index: HashMap<String, usize>,
    invalidations: Vec<(i64, &'static str)>,
    attempts: Vec<Arc<str>>,
    /// The surface undoes itself (`Surface::checkpoint`): its nodes and indexes change
    /// in place on a replace or an abandon.
    surface: Surface,
}

/// Their lengths.
#[derive(Clone, Copy)]
struct Lengths([usize; 7]);

impl Growing {
    fn take(s: &mut Sess) -> Growing {
        use std::mem::take;
        let m = &mut s.more;
        Growing {
            turns: take(&mut s.turns.closed),
            goals: take(&mut s.goal.history),
            results: take(&mut m.tools.results),
            abandoned: take(&mut m.tools.abandoned),
            todo: take(&mut m.todo.items),
            todo_index: take(&mut m.todo.index),
            invalidations: take(&mut m.business.invalidations),
            attempts: take(&mut m.compaction.attempts),
            surface: take(&mut s.surface),
        }
    }

    fn put(self, s: &mut Sess) {
        s.turns.closed = self.turns;
        s.goal.history = self.goals;
        let m = &mut s.more;
        m.tools.results = self.results;
        m.tools.abandoned = self.abandoned;
        m.todo.items = self.todo;
        m.todo.index = self.todo_index;
        m.business.invalidations = self.invalidations;
        m.compaction.attempts = self.attempts;
        s.surface = self.surface;
    }

    fn lengths(&self) -> Lengths {
        Lengths([self.turns.len(), self.goals.len(), self.results.len(), self.abandoned.len(),
                 self.todo.len(), self.invalidations.len(), self.attempts.len()])
    }

    fn truncate(&mut self, n: Lengths) {
        let [turns, goals, results, abandoned, todo, invalidations, attempts] = n.0;
        for item in self.todo.get(todo..).unwrap_or(&[]) {
            self.todo_index.remove(&item.id); // added by the batch: it was not there
        }
        self.turns.truncate(turns);
        self.goals.truncate(goals);
        self.results.truncate(results);
        self.abandoned.truncate(abandoned);
        self.todo.truncate(todo);
        self.invalidations.truncate(invalidations);
        self.attempts.truncate(attempts);
    }
}

/// A session as it was before a batch's fold (see the module docs).
pub struct Checkpoint {
    small: Box<Sess>,
    lengths: Lengths,
}

impl Checkpoint {
    /// Checkpoint `s` before folding a batch into it (journals todo's overwrites from now).
    pub fn take(s: &mut Sess) -> Checkpoint {
        let growing = Growing::take(s);
        s.more.todo.undo = None;
        let small = Box::new(s.clone());
        let lengths = growing.lengths();
        growing.put(s);
        s.more.todo.undo = Some((lengths.0[4], Vec::new()));
        s.surface.checkpoint();
        Checkpoint { small, lengths }
    }

    /// Put `s` back as it was when this checkpoint was taken.
    pub fn restore(self, s: &mut Sess) {
        let mut growing = Growing::take(s);
        if let Some((_, saved)) = s.more.todo.undo.take() {
            for (i, item) in saved.into_iter().rev() {
                growing.todo[i] = item; // the oldest saved copy of each item lands last
            }
        }
        growing.truncate(self.lengths);
        growing.surface.undo();
        *s = *self.small;
        growing.put(s);
    }

    /// The batch can no longer be undone: stop journaling todo's overwrites.
    pub fn settle(s: &mut Sess) {
        s.more.todo.undo = None;
        s.surface.settle();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units_more::TodoItem;

    fn item(id: &str, status: &str, seq: i64) -> TodoItem {
        TodoItem { id: id.into(), text: serde_json::Value::Null, status: status.into(),
                   added_seq: seq, updated_seq: seq }
    }

    fn ev(etype: &str, seq: i64, data: &str) -> crate::units::Ev {
        let op = if etype == "turn/end" { 0 } else { 1 };
        crate::units::Ev {
            session_id: "s".into(), seq, event_id: format!("e{seq}"), time: seq,
            etype: etype.into(), data: crate::json::parse_checked(data).unwrap(),
            writer_id: "w".into(), writer_epoch: 1, ignorable: false,
            turn_id: Some("t1".into()), step_id: None, format_version: 1,
            prev_event_id: None, surface_op: op,
            source_event_seqs: Vec::new(), py: None,
        }
    }

    fn call(seq: i64, ids: &[&str]) -> crate::units::Ev {
        let calls: Vec<String> = ids.iter()
            .map(|c| format!("{{\"call_id\":\"{c}\",\"name\":\"x\",\"arguments\":1}}"))
            .collect();
        ev("assistant/message", seq, &format!("{{\"content\":\"\",\"tool_calls\":[{}]}}",
                                              calls.join(",")))
    }

    fn result(seq: i64, id: &str) -> crate::units::Ev {
        ev("tool/result", seq, &format!("{{\"call_id\":\"{id}\",\"status\":\"ok\",\"content\":1}}"))
    }

    /// A surface undone after `batch` folds the events after it as one never changed.
    fn undone_surface_matches(batch: &[crate::units::Ev]) {
        let mut s = Surface::default();
        for e in [ev("user/message", 0, "{\"content\":\"hi\"}"), call(1, &["a", "b"]),
                  result(2, "a")] {
            s.apply(&e).unwrap();
        }
        let mut reference = s.clone();
        s.checkpoint();
        for e in batch {
            s.apply(e).unwrap();
        }
        s.undo();
        for e in [result(3, "b"), call(4, &["c"]), ev("turn/end", 5, "{\"reason\":\"failed\"}"),
                  ev("user/message", 6, "{\"content\":\"again\"}")] {
            assert_eq!(s.apply(&e), reference.apply(&e));
        }
        assert_eq!((s.dump(), s.tokens, s.dirty_from),
                   (reference.dump(), reference.tokens, reference.dirty_from));
    }

    #[test]
    fn a_surface_batch_of_appends_is_undone_by_its_journal() {
        undone_surface_matches(&[result(3, "b"), call(4, &["c", "a"]), result(5, "c"),
                                 ev("user/message", 6, "{\"content\":\"x\"}")]);
    }

    #[test]
    fn a_surface_batch_that_abandons_calls_is_undone_whole() {
        undone_surface_matches(&[call(3, &["c"]), ev("turn/end", 4, "{\"reason\":\"cancelled\"}"),
                                 ev("user/message", 5, "{\"content\":\"x\"}")]);
    }

    #[test]
    fn restore_drops_what_the_batch_added_and_puts_back_what_it_overwrote() {
        let mut s = Sess::new("s", 0, 60);
        s.more.todo.items = vec![item("a", "pending", 1), item("b", "pending", 2)];
        s.more.todo.index = [("a".to_string(), 0), ("b".to_string(), 1)].into_iter().collect();
        s.more.tools.abandoned.push(Arc::from("x"));
        s.as_of_seq = 2;
        let cp = Checkpoint::take(&mut s);
        // the batch: overwrite a twice, add c, grow another collection, move the position
        s.more.todo.journal(0);
        s.more.todo.items[0] = item("a", "done", 3);
        s.more.todo.journal(0);
        s.more.todo.items[0] = item("a", "failed", 4);
        s.more.todo.index.insert("c".into(), 2);
        s.more.todo.items.push(item("c", "pending", 5));
        s.more.tools.abandoned.push(Arc::from("y"));
        s.as_of_seq = 5;
        cp.restore(&mut s);
        let t = &s.more.todo;
        assert_eq!(t.items.iter().map(|i| (i.id.as_str(), i.status.as_str())).collect::<Vec<_>>(),
                   [("a", "pending"), ("b", "pending")]);
        assert_eq!(t.index.len(), 2);
        assert!(t.undo.is_none());
        assert_eq!(s.more.tools.abandoned.len(), 1);
        assert_eq!(s.as_of_seq, 2);
    }
}
