//! A native chunked unit's chunk fields, deletes and manifest (ADR 0013), as
//! `streams.native_fold.native_chunks` writes them in Python: the live worker's and the
//! replay's session write is built here from the parts `Folder::fields_of` gives, without
//! a Python string per item (`Folder.write_fields`).

use std::collections::BTreeMap;
use foldhash::{HashMap, HashMapExt};

use crate::json::{write_int, write_str};

/// One collection of a chunked unit: its name, kind ("list"/"object") and the view or
/// state key it is spliced in under (core/projections: `Collection`).
pub struct Shape {
    pub name: String,
    pub kind: String,
    pub view_key: Option<String>,
    pub state_key: Option<String>,
}

/// What a row stores of a unit: items per chunk and, per collection, its chunks.
pub type Stored = (usize, HashMap<String, usize>);

/// `parts:<key>`'s JSON (core.rows.manifest, canonical: sorted keys, no spaces).
fn manifest(shapes: &[Shape], lists: &BTreeMap<&str, (&str, usize, usize)>, chunk: usize)
            -> String {
    let mut out = String::from("{\"chunk\":");
    write_int(&mut out, chunk as i64);
    out.push_str(",\"lists\":{");
    for (i, (name, (kind, items, chunks))) in lists.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(&mut out, name);
        out.push_str(":{\"chunks\":");
        write_int(&mut out, *chunks as i64);
        out.push_str(",\"items\":");
        write_int(&mut out, *items as i64);
        out.push_str(",\"kind\":");
        write_str(&mut out, kind);
        out.push('}');
    }
    let splice = |out: &mut String, pick: &dyn Fn(&Shape) -> Option<&String>| {
        let map: BTreeMap<&str, &str> = shapes.iter()
            .filter_map(|s| pick(s).map(|k| (k.as_str(), s.name.as_str()))).collect();
        out.push('{');
        for (i, (k, v)) in map.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_str(out, k);
            out.push(':');
            write_str(out, v);
        }
        out.push('}');
    };
    out.push_str("},\"state\":");
    splice(&mut out, &|s| s.state_key.as_ref());
    out.push_str(",\"v\":1,\"view\":");
    splice(&mut out, &|s| s.view_key.as_ref());
    out.push('}');
    out
}

/// The chunk fields (appended to `fields`), the chunks to delete and the manifest of
/// unit `key` from its `parts` (collection, items, first item given, the item texts from
/// it); `stored`: what the row holds (None, or another chunk size: every chunk is
/// written). Returns the chunks per collection stored now.
pub fn unit_chunks(key: &str, shapes: &[Shape], parts: &[(&str, usize, usize, &[String])],
                   stored: Option<&Stored>, chunk: usize, fields: &mut Vec<(String, String)>,
                   deletes: &mut Vec<String>) -> Result<HashMap<String, usize>, String> {
    let empty = HashMap::new();
    let (size, had) = stored.map(|(s, h)| (*s, h)).unwrap_or((0, &empty));
    let mut lists: BTreeMap<&str, (&str, usize, usize)> = BTreeMap::new();
    let mut counts = HashMap::new();
    for (name, n, start, items) in parts {
        let (n, start) = (*n, *start);
        let k = n.div_ceil(chunk);
        let first = if size == chunk && had.contains_key(*name) { start / chunk } else { 0 };
        if start > first * chunk {
            return Err(format!("native fold: {key}.{name} items from {start}, the row needs \
                                them from {}", first * chunk));
        }
        for i in first..k {
            let (lo, hi) = (i * chunk - start, (n.min((i + 1) * chunk)) - start);
            let mut text = String::new();
            for t in items[lo..hi].iter().filter(|t| !t.is_empty()) {
                if !text.is_empty() {
                    text.push(',');
                }
                text.push_str(t);
            }
            fields.push((format!("{}{key}:{name}:{i}", crate::layout::PART), text));
        }
        for i in k..had.get(*name).copied().unwrap_or(0) {
            deletes.push(format!("{}{key}:{name}:{i}", crate::layout::PART));
        }
        let kind = shapes.iter().find(|s| s.name == *name).map(|s| s.kind.as_str())
            .ok_or_else(|| format!("native fold: {key} has no collection {name:?}"))?;
        lists.insert(name, (kind, n, k));
        counts.insert(name.to_string(), k);
    }
    fields.push((format!("{}{key}", crate::layout::PARTS), manifest(shapes, &lists, chunk)));
    Ok(counts)
}
