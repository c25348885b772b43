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

use std::collections::HashMap;
use std::sync::Arc;

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
        let surface = std::mem::take(&mut s.surface); // journals its own undo
        s.more.todo.undo = None;
        let small = Box::new(s.clone());
        let lengths = growing.lengths();
        growing.put(s);
        s.surface = surface;
        s.surface.begin();
        s.more.todo.undo = Some((lengths.0[4], Vec::new()));
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
        let mut surface = std::mem::take(&mut s.surface);
        surface.undo();
        *s = *self.small;
        growing.put(s);
        s.surface = surface;
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
