//! Chunked storage of the native units' growing parts (ADR 0013).
//!
//! The Python units declare `collections` (core/projections/*.py): a head (the view
//! and dump without those keys) plus item texts stored in chunks of `chunk` items.
//! Here each native chunked unit (turns, tools, todo, compaction; the surface in
//! surface.rs: its lowest position changed, `Surface::dirty_from`) gives its heads and,
//! per collection, its item count and the item texts from the first chunk that may
//! have changed since the session's last write: the items are exactly the Python
//! unit's `items()`, so the row is the one the Python processor writes, while a
//! batch builds O(its events + one chunk) of text, not O(session).
//!
//! What "may have changed" means per collection: closed turns, tool results and
//! abandoned calls and closed compaction attempts are append-only (items below the
//! count at the last write are as written); the view's turns end with the open turn,
//! at the index of the next closed one; todo items change in place, so the todo state
//! keeps the lowest position changed since the last write (`Todo::dirty_from`).

use crate::json::{write_int, write_opt_int, write_opt_str, write_str};
use crate::units::Turns;
use crate::units_more::{Compaction, Todo, Tools};

/// (collection, items, index of the first item given, the item texts from it).
pub type Part = (&'static str, usize, usize, Vec<String>);

/// Item counts as of the session's last chunked write (append-only collections).
#[derive(Clone, Debug, Default)]
pub struct Marks {
    pub closed: usize,
    pub results: usize,
    pub abandoned: usize,
    pub attempts: usize,
}

fn aligned(from: usize, n: usize, chunk: usize) -> usize {
    (from.min(n) / chunk.max(1)) * chunk.max(1)
}

/// (view head, state head, parts) of the turns unit.
pub fn turns(t: &Turns, marks: &mut Marks, chunk: usize) -> (String, String, Vec<Part>) {
    let closed = t.closed.len();
    let total = closed + t.open.is_some() as usize;
    let mut view = String::from("{\"counts\":");
    t.write_counts(&mut view);
    view.push_str(",\"open_step\":");
    write_opt_str(&mut view, t.open_step.as_deref());
    view.push_str(",\"open_turn\":");
    write_opt_str(&mut view, t.open.as_ref().map(|o| o.turn_id.as_str()));
    view.push_str(",\"total\":");
    write_int(&mut view, total as i64);
    view.push('}');
    let mut state = String::from("{\"counts\":");
    t.write_counts(&mut state);
    state.push_str(",\"open\":");
    match &t.open {
        Some(o) => o.write(&mut state),
        None => state.push_str("null"),
    }
    state.push_str(",\"open_step\":");
    write_opt_str(&mut state, t.open_step.as_deref());
    state.push_str(",\"open_step_seq\":");
    write_opt_int(&mut state, t.open_step_seq);
    state.push('}');
    let start = aligned(marks.closed, closed, chunk);
    let text = |x: &crate::units::Turn| {
        let mut o = String::with_capacity(128);
        x.write(&mut o);
        o
    };
    let closed_texts: Vec<String> = t.closed[start..].iter().map(|x| text(x)).collect();
    let mut turn_texts = closed_texts.clone();
    if let Some(o) = &t.open {
        turn_texts.push(text(o));
    }
    marks.closed = closed;
    (view, state, vec![("turns", total, start, turn_texts), ("closed", closed, start, closed_texts)])
}

/// Heads and parts of the tools unit (heads are the same for view and state).
pub fn tools(t: &Tools, marks: &mut Marks, chunk: usize) -> (String, String, Vec<Part>) {
    let head = t.head_text();
    let n = t.results.len();
    let start = aligned(marks.results, n, chunk);
    let rows = &t.results[start..];
    let results: Vec<String> = rows.iter().map(|r| r.text.clone()).collect();
    let by_id: Vec<String> = rows.iter().map(|r| {
        let mut o = String::with_capacity(r.call_id.len() + r.text.len() + 3);
        write_str(&mut o, &r.call_id);
        o.push(':');
        o.push_str(&r.text);
        o
    }).collect();
    let ops: Vec<String> = rows.iter().map(|r| match &r.operation_id {
        Some(op) => {
            let mut o = String::with_capacity(op.len() + r.call_id.len() + 5);
            write_str(&mut o, op);
            o.push(':');
            write_str(&mut o, &r.call_id);
            o
        }
        None => String::new(),
    }).collect();
    let na = t.abandoned.len();
    let astart = aligned(marks.abandoned, na, chunk);
    let abandoned: Vec<String> = t.abandoned[astart..].iter().map(|a| a.to_string()).collect();
    marks.results = n;
    marks.abandoned = na;
    (head.clone(), head, vec![("results", n, start, results), ("results_by_id", n, start, by_id),
                              ("operation_ids", n, start, ops), ("abandoned", na, astart, abandoned)])
}

/// Heads and parts of the todo unit.
pub fn todo(t: &mut Todo, chunk: usize) -> (String, String, Vec<Part>) {
    let (view, state) = t.heads();
    let n = t.items.len();
    let start = aligned(t.dirty_from, n, chunk);
    let items = t.item_texts(start);
    t.dirty_from = n;
    (view, state, vec![("items", n, start, items)])
}

/// Heads and parts of the compaction unit (the same head for view and state).
pub fn compaction(c: &Compaction, marks: &mut Marks, chunk: usize) -> (String, String, Vec<Part>) {
    let head = c.head_text();
    let n = c.attempts.len();
    let start = aligned(marks.attempts, n, chunk);
    let texts = c.attempts[start..].iter().map(|a| a.to_string()).collect();
    marks.attempts = n;
    (head.clone(), head, vec![("attempts", n, start, texts)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units_more::ResultRow;
    use std::sync::Arc;

    #[test]
    fn parts_start_at_the_chunk_of_the_first_unwritten_item() {
        assert_eq!(aligned(0, 10, 4), 0);
        assert_eq!(aligned(5, 10, 4), 4);
        assert_eq!(aligned(8, 10, 4), 8);
        assert_eq!(aligned(12, 10, 4), 8); // never past the items
        let mut t = Todo::default();
        let (view, state, parts) = todo(&mut t, 32);
        assert_eq!(view, "{\"counts\":{},\"unknown_updates\":0}");
        assert_eq!(state, "{\"unknown_updates\":0}");
        assert_eq!(parts, vec![("items", 0, 0, Vec::<String>::new())]);
    }

    fn result(cid: &str, op: Option<&str>) -> Arc<ResultRow> {
        Arc::new(ResultRow { call_id: cid.into(), operation_id: op.map(str::to_string),
                             text: format!("{{\"call_id\":\"{cid}\"}}") })
    }

    #[test]
    fn tools_give_only_the_chunks_after_the_last_write_and_keep_every_result_item() {
        let mut t = Tools::default();
        let mut marks = Marks::default();
        for i in 0..5 {
            t.results.push(result(if i == 3 { "c0" } else { ["c0", "c1", "c2", "c3", "c4"][i] },
                                  (i % 2 == 0).then_some("op")));
        }
        let (_, _, parts) = tools(&t, &mut marks, 2);
        let by_id = &parts[1];
        assert_eq!((by_id.0, by_id.1, by_id.2, by_id.3.len()), ("results_by_id", 5, 0, 5));
        assert_eq!(by_id.3[3], "\"c0\":{\"call_id\":\"c0\"}"); // a repeated call id stays
        assert_eq!(parts[2].3[1], ""); // no operation id: an empty item, still counted
        t.results.push(result("c5", None));
        let (_, _, parts) = tools(&t, &mut marks, 2);
        assert_eq!((parts[0].1, parts[0].2, parts[0].3.len()), (6, 4, 2)); // from chunk 2
        let (_, _, parts) = tools(&t, &mut marks, 2);
        assert_eq!((parts[0].2, parts[0].3.len()), (6, 0)); // nothing new
    }
}
