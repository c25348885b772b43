//! Lossless JSON: the trust-boundary check of `data` and the canonical text.
//!
//! Mirrors `sessionstream.core.jsonvalue`: integers within [-2**63, 2**63-1], finite
//! floats, no lone surrogate, containers nested at most 64 deep; canonical text is
//! Python's `json.JSONEncoder(sort_keys=True, separators=(",", ":"),
//! ensure_ascii=False)` — keys sorted by code point (byte order of UTF-8), floats as
//! Python's `repr`.

use serde_json::{Map, Number, Value};

pub const MAX_DEPTH: usize = 64;

/// The value of `text` if it is lossless JSON, else None (the Python codec then
/// produces the dead letter with its message).
pub fn parse_checked(text: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(text).ok()?;
    if check(&value, 0) {
        Some(value)
    } else {
        None
    }
}

fn check(v: &Value, depth: usize) -> bool {
    match v {
        Value::Null | Value::Bool(_) | Value::String(_) => true,
        Value::Number(n) => number_ok(n),
        Value::Array(items) => depth < MAX_DEPTH && items.iter().all(|x| check(x, depth + 1)),
        Value::Object(map) => depth < MAX_DEPTH && map.values().all(|x| check(x, depth + 1)),
    }
}

pub fn is_float_text(s: &str) -> bool {
    s.bytes().any(|b| b == b'.' || b == b'e' || b == b'E')
}

fn number_ok(n: &Number) -> bool {
    let s = n.as_str();
    if is_float_text(s) {
        matches!(s.parse::<f64>(), Ok(f) if f.is_finite())
    } else {
        s.parse::<i64>().is_ok()
    }
}

/// An integer JSON value (not a float, not a bool), as Python's `type(v) is int`.
pub fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) if !is_float_text(n.as_str()) => n.as_str().parse::<i64>().ok(),
        _ => None,
    }
}

/// Python truthiness of a JSON value.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
        Value::Number(n) => {
            let s = n.as_str();
            if is_float_text(s) {
                s.parse::<f64>().map(|f| f != 0.0).unwrap_or(true)
            } else {
                s.parse::<i64>().map(|i| i != 0).unwrap_or(true)
            }
        }
    }
}

pub fn dumps(v: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_value(&mut out, v);
    out
}

pub fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, x);
            }
            out.push(']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>) {
    // serde_json's Map is a BTreeMap without `preserve_order`: already sorted by bytes.
    out.push('{');
    for (i, (k, x)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_str(out, k);
        out.push(':');
        write_value(out, x);
    }
    out.push('}');
}

fn write_number(out: &mut String, n: &Number) {
    let s = n.as_str();
    if is_float_text(s) {
        write_float(out, s.parse::<f64>().unwrap_or(0.0));
    } else {
        match s.parse::<i64>() {
            Ok(i) => out.push_str(&i.to_string()),
            Err(_) => out.push_str(s),
        }
    }
}

pub fn write_int(out: &mut String, i: i64) {
    out.push_str(&i.to_string());
}

/// Python's `float.__repr__`: shortest round-trip digits; exponent form when the
/// decimal point is at or before 4 zeros after it, or past 16 digits.
pub fn write_float(out: &mut String, f: f64) {
    if f == 0.0 {
        out.push_str(if f.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let sci = format!("{:e}", f); // e.g. "-1.2345e-5": shortest round-trip digits
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let decpt = exp + 1;
    if neg {
        out.push('-');
    }
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let a = e.abs();
        if a < 10 {
            out.push('0');
        }
        out.push_str(&a.to_string());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt as usize >= digits.len() {
        out.push_str(&digits);
        for _ in 0..(decpt as usize - digits.len()) {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        out.push_str(&digits[..decpt as usize]);
        out.push('.');
        out.push_str(&digits[decpt as usize..]);
    }
}

pub fn write_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    // runs of bytes that need no escape are copied at once (escapes are ASCII, so a
    // byte test never splits a UTF-8 sequence)
    let bytes = s.as_bytes();
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if b >= 0x20 && b != b'"' && b != b'\\' {
            continue;
        }
        out.push_str(&s[run..i]);
        run = i + 1;
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => out.push_str(&format!("\\u{:04x}", b)),
        }
    }
    out.push_str(&s[run..]);
    out.push('"');
}

pub fn write_opt_str(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => write_str(out, s),
        None => out.push_str("null"),
    }
}

pub fn write_opt_int(out: &mut String, i: Option<i64>) {
    match i {
        Some(i) => write_int(out, i),
        None => out.push_str("null"),
    }
}

/// Python's `repr(str)` for the admission sentences (`{writer.id!r}`).
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if (0x80..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(x: f64) -> String {
        let mut s = String::new();
        write_float(&mut s, x);
        s
    }

    #[test]
    fn strings_escape_as_python_json_dumps_without_ensure_ascii() {
        let mut s = String::new();
        write_str(&mut s, "a\"b\\c\n\r\t\u{8}\u{c}\u{0}\u{1f} é😀\u{7f}\u{2028}z");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0000\\u001f é😀\u{7f}\u{2028}z\"");
        s.clear();
        write_str(&mut s, "");
        assert_eq!(s, "\"\"");
    }

    #[test]
    fn floats_print_as_python_repr() {
        assert_eq!(f(1.0), "1.0");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(1e16), "1e+16");
        assert_eq!(f(1e15), "1000000000000000.0");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(0.00001), "1e-05");
        assert_eq!(f(-1.5e-7), "-1.5e-07");
        assert_eq!(f(123.456), "123.456");
        assert_eq!(f(1.7976931348623157e308), "1.7976931348623157e+308");
        assert_eq!(f(-0.0), "-0.0");
    }

    #[test]
    fn lossless_bounds() {
        assert!(parse_checked("9223372036854775807").is_some());
        assert!(parse_checked("9223372036854775808").is_none());
        assert!(parse_checked("-9223372036854775808").is_some());
        assert!(parse_checked("1e400").is_none());
        assert!(parse_checked("NaN").is_none());
        assert!(parse_checked("\"\\ud800\"").is_none());
        let deep_ok = "[".repeat(64) + &"]".repeat(64);
        let deep_bad = "[".repeat(65) + &"]".repeat(65);
        assert!(parse_checked(&deep_ok).is_some());
        assert!(parse_checked(&deep_bad).is_none());
    }

    #[test]
    fn canonical_text() {
        let v = parse_checked(r#"{"b":1,"a":[1.0,"\u0001\n",null,true],"é":2}"#).unwrap();
        assert_eq!(dumps(&v), "{\"a\":[1.0,\"\\u0001\\n\",null,true],\"b\":1,\"é\":2}");
    }
}
