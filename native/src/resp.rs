//! The batch's compare-and-set script call (`streams.sink.WRITE_SESSION_LUA`) as ready
//! RESP bytes: one `EVALSHA`/`EVAL` command, byte for byte what redis-py's
//! `pack_command` sends for the same arguments (tests/unit/test_native_resp.py), built
//! without a Python object per field.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

struct Resp {
    body: Vec<u8>,
    args: usize,
}

impl Resp {
    fn arg(&mut self, raw: &[u8]) {
        self.body.push(b'$');
        self.body.extend_from_slice(raw.len().to_string().as_bytes());
        self.body.extend_from_slice(b"\r\n");
        self.body.extend_from_slice(raw);
        self.body.extend_from_slice(b"\r\n");
        self.args += 1;
    }

    fn int(&mut self, n: i64) {
        self.arg(n.to_string().as_bytes());
    }

    fn text(&mut self, v: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
        let s = v.downcast::<PyString>().map_err(|_| PyTypeError::new_err(format!(
            "{what} must be a str, got {}", v.get_type().name().map(|n| n.to_string())
                .unwrap_or_default())))?;
        self.arg(s.to_str()?.as_bytes());
        Ok(())
    }
}

/// `command script numkeys keys… change_maxlen args…` for `calls`, each
/// `(row_key, changes_key, base_offset, last_offset, as_of_seq, force, change_entry,
/// fields (dict str -> str), deletes (sequence of str))`, in the script's layout.
/// `keys_before` go before the sessions' keys, `args_before` before `change_maxlen`,
/// `tail` after the sessions' arguments (the one-call batch script, streams.sink).
#[pyfunction]
#[pyo3(signature = (command, script, change_maxlen, calls, keys_before = Vec::new(),
                    args_before = Vec::new(), tail = Vec::new()))]
#[allow(clippy::too_many_arguments)]
pub fn pack_session_writes<'py>(py: Python<'py>, command: &str, script: &str,
                                change_maxlen: i64, calls: &Bound<'py, PyList>,
                                keys_before: Vec<String>, args_before: Vec<String>,
                                tail: Vec<String>)
                                -> PyResult<Bound<'py, PyBytes>> {
    let mut keys = Resp { body: Vec::with_capacity(calls.len() * 96), args: 0 };
    let mut args = Resp { body: Vec::with_capacity(calls.len() * 1024), args: 0 };
    for k in &keys_before {
        keys.arg(k.as_bytes());
    }
    for a in &args_before {
        args.arg(a.as_bytes());
    }
    args.int(change_maxlen);
    for call in calls.iter() {
        let t = call.downcast::<PyTuple>()?;
        if t.len() != 9 {
            return Err(PyTypeError::new_err("a session write call is a 9-tuple"));
        }
        keys.text(&t.get_item(0)?, "a row key")?;
        keys.text(&t.get_item(1)?, "a change stream key")?;
        args.int(t.get_item(2)?.extract()?);
        args.int(t.get_item(3)?.extract()?);
        args.int(t.get_item(4)?.extract()?);
        args.arg(if t.get_item(5)?.is_truthy()? { b"1" } else { b"0" });
        args.text(&t.get_item(6)?, "a change entry")?;
        let fields = t.get_item(7)?;
        let fields = fields.downcast::<PyDict>()?;
        args.int(fields.len() as i64);
        for (k, v) in fields.iter() {
            args.text(&k, "a field name")?;
            args.text(&v, "a field value")?;
        }
        let deletes = t.get_item(8)?;
        args.int(deletes.len()? as i64);
        for d in deletes.try_iter()? {
            args.text(&d?, "a field to delete")?;
        }
    }
    for a in &tail {
        args.arg(a.as_bytes());
    }
    let mut head = Resp { body: Vec::with_capacity(64), args: 0 };
    head.arg(command.as_bytes());
    head.arg(script.as_bytes());
    head.int((keys.args) as i64);
    let total = head.args + keys.args + args.args;
    let mut out = Vec::with_capacity(16 + head.body.len() + keys.body.len() + args.body.len());
    out.push(b'*');
    out.extend_from_slice(total.to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head.body);
    out.extend_from_slice(&keys.body);
    out.extend_from_slice(&args.body);
    Ok(PyBytes::new(py, &out))
}
