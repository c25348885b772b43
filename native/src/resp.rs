//! The batch's compare-and-set script call (`streams.sink.WRITE_SESSION_LUA`) as ready
//! RESP bytes: one `EVALSHA`/`EVAL` command, byte for byte what redis-py's
//! `pack_command` sends for the same arguments (tests/unit/test_native_resp.py), built
//! without a Python object per field.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// A run of RESP bulk strings (`$<len>\r\n<bytes>\r\n` each), counted.
struct Resp {
    body: Vec<u8>,
    args: usize,
}

/// The decimal digits of `n` into `out` (no allocation: a length or an offset per arg).
fn push_int(out: &mut Vec<u8>, n: i64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let neg = n < 0;
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if neg {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[i..]);
}

impl Resp {
    fn with_capacity(n: usize) -> Resp {
        Resp { body: Vec::with_capacity(n), args: 0 }
    }

    fn arg(&mut self, raw: &[u8]) {
        self.body.push(b'$');
        push_int(&mut self.body, raw.len() as i64);
        self.body.extend_from_slice(b"\r\n");
        self.body.extend_from_slice(raw);
        self.body.extend_from_slice(b"\r\n");
        self.args += 1;
    }

    fn int(&mut self, n: i64) {
        let mut digits = Vec::with_capacity(20);
        push_int(&mut digits, n);
        self.arg(&digits);
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
    // the fields' bytes first, so the arguments are written into one allocation
    let mut size = 64 * (tail.len() + args_before.len() + 8);
    for call in calls.iter() {
        if let Ok(t) = call.downcast::<PyTuple>() {
            if let Ok(f) = t.get_item(7) {
                if let Ok(d) = f.downcast::<PyDict>() {
                    for (k, v) in d.iter() {
                        size += 32 + k.len().unwrap_or(0) + v.len().unwrap_or(0);
                    }
                }
            }
        }
    }
    let mut keys = Resp::with_capacity(calls.len() * 96 + 64 * keys_before.len());
    let mut args = Resp::with_capacity(size + calls.len() * 256);
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
    let mut head = Resp::with_capacity(128);
    head.arg(command.as_bytes());
    head.arg(script.as_bytes());
    head.int((keys.args) as i64);
    let total = head.args + keys.args + args.args;
    let mut star = vec![b'*'];
    push_int(&mut star, total as i64);
    star.extend_from_slice(b"\r\n");
    let parts = [&star[..], &head.body[..], &keys.body[..], &args.body[..]];
    let len = parts.iter().map(|p| p.len()).sum();
    // written straight into the bytes object (no second buffer)
    PyBytes::new_with(py, len, |buf| {
        let mut at = 0;
        for part in parts {
            buf[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        Ok(())
    })
}
