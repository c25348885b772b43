//! A consumed batch of confluent-kafka `Message`s read in one pass without a Python
//! object per message (streams/batch.py): which carry an error, the highest offset and
//! the first message of each partition. `Folder.fold` reads the messages themselves
//! (their `partition()`, `offset()`, `key()`, `value()`), as it reads a `Record`.

use foldhash::{HashMap, HashMapExt};

use pyo3::prelude::*;
use pyo3::types::PyList;

/// `(good, errors, high, first)` of `messages`: the indices of the messages without an
/// error and of those with one, per partition the highest offset and the index of the
/// first good message.
#[allow(clippy::type_complexity)]
#[pyfunction]
pub fn scan_messages(py: Python<'_>, messages: &Bound<'_, PyList>)
                     -> PyResult<(Vec<usize>, Vec<usize>, HashMap<i64, i64>, HashMap<i64, usize>)> {
    let s_error = pyo3::intern!(py, "error");
    let s_partition = pyo3::intern!(py, "partition");
    let s_offset = pyo3::intern!(py, "offset");
    let mut good = Vec::with_capacity(messages.len());
    let mut errors = Vec::new();
    let mut high: HashMap<i64, i64> = HashMap::new();
    let mut first: HashMap<i64, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        if !m.call_method0(s_error)?.is_none() {
            errors.push(i);
            continue;
        }
        let p: Option<i64> = m.call_method0(s_partition)?.extract()?;
        let o: Option<i64> = m.call_method0(s_offset)?.extract()?;
        let (p, o) = (p.unwrap_or(0), o.unwrap_or(0));
        let h = high.entry(p).or_insert(o);
        if o > *h {
            *h = o;
        }
        first.entry(p).or_insert(good.len());
        good.push(i);
    }
    Ok((good, errors, high, first))
}
