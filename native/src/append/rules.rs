//! The session rules of the append path for the types whose admission changes no
//! session state beyond the log itself (docs/adr/0016): `assistant/chunk`, audit and
//! plugin types. What `Session.append` does for them, in one call: the catalog's
//! schema check, the surface-op and scope rules, the turn/step ids, the epoch, the
//! event's id, time and `prev_event_id`, the `Event` itself (cached text, lossless
//! mark), its place in the log, and the clear record.
//!
//! Anything else (a type with state effects, a rule that would fail, an unusual
//! field) is declined before any change and before the id source or clock is called:
//! the caller then runs `Session.append`, the reference, which raises exactly what it
//! raises. tests/unit/test_native_append.py holds both to the same events, records
//! and errors on generated session walks.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use super::{long_of, text_of, Appender, Decline, Env, R};

/// Kinds of a schema field (catalog._KINDS), as bits.
const K_STR: u16 = 1;
const K_INT: u16 = 2;
const K_NUM: u16 = 4;
const K_BOOL: u16 = 8;
const K_LIST: u16 = 16;
const K_OBJ: u16 = 32;
const K_NULL: u16 = 64;
const K_ANY: u16 = 128;

/// One field's schema (catalog.F).
pub(super) struct Field {
    kinds: u16,
    required: bool,
    enum_: Option<Py<PyAny>>, // a tuple: `value in enum` as Python tests it
    obj: Option<Vec<(Py<PyString>, Field)>>,
    items: Option<Box<Field>>,
}

/// A type's rules (catalog.EventType, for a type without state effects).
pub(super) struct Rules {
    scope: u8,    // 0 anywhere, 1 turn, 2 step
    ops: Vec<i64>, // allowed surface ops (0 none, 1 append, 2 replace); the first is the default
    ignorable: bool,
    schema: Vec<(Py<PyString>, Field)>,
}

/// What `Appender.bind` hands in.
pub(super) struct Bound_ {
    pub(super) make_event: Py<PyAny>,
    /// The Event class and the byte offset of each of its slots (`SLOT_ORDER`), when
    /// `bind` verified its layout: the event is then filled in place.
    pub(super) layout: Option<(Py<PyAny>, Vec<usize>)>,
    pub(super) ops: Vec<Py<PyAny>>,
    pub(super) uuid4_ids: Py<PyAny>,
    pub(super) system_clock: Py<PyAny>,
    pub(super) rules_for: Py<PyAny>,
    pub(super) format_version: i64,
    pub(super) data_limit: i64,
}

fn kinds_of(names: &Bound<'_, PyAny>) -> PyResult<u16> {
    let mut k = 0;
    for n in names.try_iter()? {
        k |= match n?.extract::<String>()?.as_str() {
            "str" => K_STR,
            "int" => K_INT,
            "num" => K_NUM,
            "bool" => K_BOOL,
            "list" => K_LIST,
            "obj" => K_OBJ,
            "null" => K_NULL,
            "any" => K_ANY,
            other => return Err(pyo3::exceptions::PyValueError::new_err(
                format!("unknown schema kind {other:?}"))),
        };
    }
    Ok(k)
}

/// A field spec from `(kinds, required, enum | None, obj | None, items | None)`.
fn field_of(spec: &Bound<'_, PyAny>) -> PyResult<Field> {
    let t = spec.downcast::<PyTuple>()?;
    let enum_ = t.get_item(2)?;
    let obj = t.get_item(3)?;
    let items = t.get_item(4)?;
    Ok(Field {
        kinds: kinds_of(&t.get_item(0)?)?,
        required: t.get_item(1)?.is_truthy()?,
        enum_: if enum_.is_none() { None } else { Some(enum_.unbind()) },
        obj: if obj.is_none() { None } else { Some(schema_of(&obj)?) },
        items: if items.is_none() { None } else { Some(Box::new(field_of(&items)?)) },
    })
}

/// An object schema from `[(name, field spec), ...]`.
fn schema_of(spec: &Bound<'_, PyAny>) -> PyResult<Vec<(Py<PyString>, Field)>> {
    let mut out = Vec::new();
    for item in spec.try_iter()? {
        let item = item?;
        let t = item.downcast::<PyTuple>()?;
        let name = t.get_item(0)?.downcast_into::<PyString>()?;
        out.push((name.unbind(), field_of(&t.get_item(1)?)?));
    }
    Ok(out)
}

/// Rules from `(scope, ops, ignorable, schema)` (producers/native_append.py builds it).
fn rules_of(spec: &Bound<'_, PyAny>) -> PyResult<Rules> {
    let t = spec.downcast::<PyTuple>()?;
    Ok(Rules {
        scope: t.get_item(0)?.extract()?,
        ops: t.get_item(1)?.extract()?,
        ignorable: t.get_item(2)?.is_truthy()?,
        schema: schema_of(&t.get_item(3)?)?,
    })
}

impl Appender {
    fn is_map(&self, v: &Bound<'_, PyAny>) -> bool {
        v.get_type().is(self.frozen_map.bind(v.py()))
    }

    fn is_flist(&self, v: &Bound<'_, PyAny>) -> bool {
        v.get_type().is(self.frozen_list.bind(v.py()))
    }

    /// catalog._check_field on a frozen value: Ok when Python's check passes.
    fn check_field(&self, f: &Field, v: &Bound<'_, PyAny>, depth: usize) -> R<()> {
        if depth > 80 {
            return Err(Decline);
        }
        if f.kinds & K_ANY == 0 {
            let ok = if v.is_none() {
                f.kinds & K_NULL != 0
            } else if v.is_exact_instance_of::<PyBool>() {
                f.kinds & K_BOOL != 0
            } else if v.is_exact_instance_of::<PyInt>() {
                f.kinds & (K_INT | K_NUM) != 0
            } else if v.is_exact_instance_of::<PyFloat>() {
                f.kinds & K_NUM != 0
            } else if v.is_exact_instance_of::<PyString>() {
                f.kinds & K_STR != 0
            } else if self.is_map(v) {
                f.kinds & K_OBJ != 0
            } else if self.is_flist(v) {
                f.kinds & K_LIST != 0
            } else {
                false
            };
            if !ok {
                return Err(Decline);
            }
        }
        if let Some(e) = &f.enum_ {
            if !e.bind(v.py()).contains(v).map_err(|_| Decline)? {
                return Err(Decline);
            }
        }
        if let Some(obj) = &f.obj {
            if self.is_map(v) {
                self.check_obj(obj, v, depth + 1)?;
            } else if v.downcast::<PyDict>().is_ok() {
                return Err(Decline);
            }
        }
        if let Some(items) = &f.items {
            if self.is_flist(v) {
                for x in v.try_iter().map_err(|_| Decline)? {
                    self.check_field(items, &x.map_err(|_| Decline)?, depth + 1)?;
                }
            } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
                return Err(Decline);
            }
        }
        Ok(())
    }

    /// catalog.Obj.check on a frozen map.
    fn check_obj(&self, schema: &[(Py<PyString>, Field)], v: &Bound<'_, PyAny>, depth: usize)
        -> R<()> {
        if !self.is_map(v) {
            return Err(Decline);
        }
        let d = v.downcast::<PyDict>().map_err(|_| Decline)?;
        for (name, f) in schema {
            match d.get_item(name.bind(v.py())).map_err(|_| Decline)? {
                None => {
                    if f.required {
                        return Err(Decline);
                    }
                }
                Some(item) => self.check_field(f, &item, depth)?,
            }
        }
        Ok(())
    }

    fn rules(&mut self, session: &Bound<'_, PyAny>, etype: &str) -> PyResult<bool> {
        if let Some(r) = self.rules.get(etype) {
            return Ok(r.is_some());
        }
        let b = self.bound.as_ref().ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err("Appender.bind was not called")
        })?;
        let spec = b.rules_for.bind(session.py()).call1((session, etype))?;
        let r = if spec.is_none() { None } else { Some(rules_of(&spec)?) };
        let known = r.is_some();
        self.rules.insert(etype.to_owned(), r);
        Ok(known)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn append_impl<'py>(
        &mut self, py: Python<'py>, session: &Bound<'py, PyAny>, etype: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>, surface_op: &Bound<'py, PyAny>,
        source_event_seqs: &Bound<'py, PyAny>, turn_id: &Bound<'py, PyAny>,
        step_id: &Bound<'py, PyAny>, record: bool, seal: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, Option<Bound<'py, PyBytes>>)>> {
        let Ok(etype_s) = exact_text(etype) else { return Ok(None) };
        if !self.rules(session, &etype_s)? {
            return Ok(None);
        }
        match self.stamp(py, session, etype, &etype_s, data, surface_op, source_event_seqs,
                         turn_id, step_id, record, seal) {
            Ok(done) => Ok(Some(done)),
            Err(Stop::Decline) => Ok(None),
            Err(Stop::Raise(e)) => Err(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn stamp<'py>(
        &mut self, py: Python<'py>, session: &Bound<'py, PyAny>, etype: &Bound<'py, PyAny>,
        etype_s: &str, data: &Bound<'py, PyAny>, surface_op: &Bound<'py, PyAny>,
        source_event_seqs: &Bound<'py, PyAny>, turn_id: &Bound<'py, PyAny>,
        step_id: &Bound<'py, PyAny>, record: bool, seal: Option<&Bound<'py, PyAny>>,
    ) -> Result<(Bound<'py, PyAny>, Option<Bound<'py, PyBytes>>), Stop> {
        let rules = self.rules.get(etype_s).and_then(|r| r.as_ref()).ok_or(Stop::Decline)?;
        let b = self.bound.as_ref().ok_or(Stop::Decline)?;
        // The data: lossless JSON, frozen, rendered; within the writer's limit.
        // Rendered into the buffer kept between calls (no regrowth per event); put
        // back below, or dropped on a decline (the next call starts a new one).
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        let frozen = self.freeze_into(data, &mut text, 0)?;
        if text.len() as i64 > b.data_limit {
            return Err(Stop::Decline);
        }
        // The catalog's schema (Obj.check).
        self.check_obj(&rules.schema, &frozen, 0)?;
        // The surface op: the draft's or the type's default, allowed, never a replace.
        let op = if surface_op.is_none() {
            *rules.ops.first().ok_or(Stop::Decline)?
        } else {
            match text_of(surface_op)?.as_str() {
                "none" => 0,
                "append" => 1,
                "replace" => 2,
                _ => return Err(Stop::Decline),
            }
        };
        if op == 2 || !rules.ops.contains(&op) {
            return Err(Stop::Decline);
        }
        // No seqs shadowed (only a replace shadows).
        let seqs_empty = if let Ok(t) = source_event_seqs.downcast::<PyTuple>() {
            t.is_empty()
        } else if let Ok(l) = source_event_seqs.downcast::<PyList>() {
            l.is_empty()
        } else {
            false
        };
        if !seqs_empty {
            return Err(Stop::Decline);
        }
        // The session's state.
        let get = |name: &Bound<'py, PyString>| session.getattr(name).map_err(|_| Stop::Decline);
        let events_obj = get(pyo3::intern!(py, "_events"))?;
        let events = events_obj.downcast_exact::<PyList>().map_err(|_| Stop::Decline)?;
        let seq = events.len();
        if seq == 0 {
            return Err(Stop::Decline); // first-is-session-start
        }
        let open_turn = get(pyo3::intern!(py, "_open_turn"))?;
        let open_step = get(pyo3::intern!(py, "_open_step"))?;
        match rules.scope {
            1 if open_turn.is_none() => return Err(Stop::Decline),
            2 if open_step.is_none() => return Err(Stop::Decline),
            _ => {}
        }
        // Named turn/step ids must be the open ones (else Python names the rule).
        for (named, open) in [(turn_id, &open_turn), (step_id, &open_step)] {
            if !named.is_none() {
                if open.is_none() || exact_text(named)? != exact_text(open)? {
                    return Err(Stop::Decline);
                }
            }
        }
        let writer = get(pyo3::intern!(py, "_writer"))?;
        let writer_id = text_of(&writer.getattr(pyo3::intern!(py, "id"))
            .map_err(|_| Stop::Decline)?)?;
        let epoch = long_of(&writer.getattr(pyo3::intern!(py, "epoch"))
            .map_err(|_| Stop::Decline)?)?;
        if long_of(&get(pyo3::intern!(py, "_max_epoch"))?)? != epoch {
            return Err(Stop::Decline); // stale (Python refuses) or newer (Python records it)
        }
        let session_id_obj = get(pyo3::intern!(py, "session_id"))?;
        let session_id = exact_text(&session_id_obj)?;
        let last = events.get_item(seq - 1).map_err(|_| Stop::Decline)?;
        let prev_obj = last.getattr(pyo3::intern!(py, "event_id")).map_err(|_| Stop::Decline)?;
        let prev = exact_text(&prev_obj)?;
        let turn = if open_turn.is_none() { None } else { Some(exact_text(&open_turn)?) };
        let step = if open_step.is_none() { None } else { Some(exact_text(&open_step)?) };
        let ids = get(pyo3::intern!(py, "ids"))?;
        let clock = get(pyo3::intern!(py, "clock"))?;

        // Every rule holds: stamp (the id source first, then the clock, as Python does).
        let event_id_obj = if ids.is(b.uuid4_ids.bind(py)) {
            PyString::new(py, &uuid4()).into_any()
        } else {
            ids.call0().map_err(Stop::Raise)?
        };
        let time_obj = if clock.is(b.system_clock.bind(py)) {
            let ms = SystemTime::now().duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64).unwrap_or(0);
            ms.into_pyobject(py).map_err(|e| Stop::Raise(e.into()))?.into_any()
        } else {
            clock.call0().map_err(Stop::Raise)?
        };
        let op_obj = b.ops[op as usize].bind(py);
        // events.decoded_event: the core's positional constructor of an event whose data
        // is checked and frozen, with its text (plain slot stores in Python, far cheaper
        // than attribute calls from here).
        let raise = |e: PyErr| Stop::Raise(e);
        // The record is written here when asked for and the id and time are of the
        // default kinds (a custom id source or clock of another type: Python encodes).
        let stamped = match (exact_text(&event_id_obj), long_of(&time_obj)) {
            (Ok(event_id), Ok(time)) if record => Some((event_id, time)),
            _ => None,
        };
        // The event keeps the text only when Python encodes it: a record carries it,
        // and Event.data_json renders the same canonical text on demand. A copy of
        // every event's content held for the session's life was 1.4 of the 3.5 KiB
        // the writer grew per event (docs/adr/0016). A seal the extension declines
        // below renders it again in Python (rare: an unusual data shape).
        let text_obj = if stamped.is_some() { py.None().into_bound(py) }
                       else { PyString::new(py, &text).into_any() };
        let seq_obj = seq.into_pyobject(py).map_err(|e| raise(e.into()))?.into_any();
        let fv_obj = b.format_version.into_pyobject(py).map_err(|e| raise(e.into()))?.into_any();
        let ign_obj = PyBool::new(py, rules.ignorable).to_owned().into_any();
        let event = if let Some((cls, offsets)) = &b.layout {
            // In place, as decoded_event fills one (SLOT_ORDER).
            let values = [
                frozen.clone(), py.None().into_bound(py), text_obj, event_id_obj.clone(),
                fv_obj, ign_obj, PyBool::new(py, true).to_owned().into_any(),
                prev_obj.clone(), PyTuple::empty(py).into_any(), seq_obj,
                session_id_obj.clone(), PyTuple::empty(py).into_any(), open_step.clone(),
                op_obj.clone(), time_obj.clone(), open_turn.clone(), etype.clone(),
                writer.clone(),
            ];
            let event = b.object_new(py, cls).map_err(raise)?;
            // SAFETY: `bind` checked that the Event layout is object's header followed
            // by exactly these slots at these offsets (and read sentinels back through
            // the slots' descriptors); a new object's slots are NULL, and each store
            // hands over one owned reference, as the slot descriptor's setter does.
            unsafe {
                let base = event.as_ptr() as *mut u8;
                for (v, off) in values.into_iter().zip(offsets.iter()) {
                    *(base.add(*off) as *mut *mut pyo3::ffi::PyObject) = v.into_ptr();
                }
            }
            event
        } else {
        let args = PyTuple::new(py, [
            session_id_obj.clone(),
            seq_obj,
            event_id_obj.clone(), time_obj.clone(), etype.clone(),
            text_obj, frozen.clone(),
            PyBool::new(py, true).to_owned().into_any(), op_obj.clone(),
            PyTuple::empty(py).into_any(), writer.clone(),
            fv_obj, ign_obj, open_turn.clone(),
            open_step.clone(), prev_obj.clone(),
        ]).map_err(raise)?;
            b.make_event.bind(py).call1(args).map_err(raise)?
        };
        // An event refers to nothing that refers back to it (its data containers are
        // untracked already): the collector need not traverse it, as a tuple of
        // atoms is untracked.
        crate::append::untrack(&event);
        events.append(&event).map_err(Stop::Raise)?;
        let Some((event_id, time)) = stamped else {
            self.text = text;
            return Ok((event, None));
        };
        let (format_version, ignorable) = (b.format_version, rules.ignorable);
        let data = frozen;
        let mut sealed = Vec::new();
        let mut clear = None;
        if let Some(seal) = seal {
            // ContentCipher.seal_event, natively (the key from `key_for`, per class).
            let t = seal.downcast::<PyTuple>().map_err(|e| Stop::Raise(e.into()))?;
            let item = |i| t.get_item(i).map_err(Stop::Raise);
            let tenant = exact_text(&item(0)?)?;
            let (key_for, nonce_src, plan_for) = (item(1)?, item(2)?, item(3)?);
            if !self.plans.contains_key(etype_s) {
                let spec = plan_for.call1((etype,)).map_err(Stop::Raise)?;
                let spec = spec.downcast::<PyTuple>().map_err(|e| Stop::Raise(e.into()))?;
                let get = |i| spec.get_item(i).map_err(Stop::Raise);
                let ex = |e: PyErr| Stop::Raise(e);
                self.set_plan(etype_s.to_owned(), get(0)?.extract().map_err(ex)?,
                              get(1)?.extract().map_err(ex)?, get(2)?.extract().map_err(ex)?,
                              get(3)?.extract().map_err(ex)?);
            }
            let nonces: Vec<u8> = if nonce_src.is_none() {
                random_bytes(3 * crate::crypto::NONCE_BYTES)
            } else {
                nonce_src.call1((3 * crate::crypto::NONCE_BYTES,)).and_then(|n| n.extract())
                    .map_err(Stop::Raise)?
            };
            match self.seal_parts(etype_s, &data, &tenant, &session_id, &event_id, seq as i64,
                                  &key_for, &nonces).map_err(Stop::Raise)? {
                None => return Ok((event, None)), // Python seals it
                Some((c, parts)) => {
                    clear = c;
                    sealed = parts;
                }
            }
        }
        let env = Env { format_version, session_id: &session_id, seq: seq as i64,
                        event_id: &event_id, time, etype: etype_s, op, seqs: &[],
                        writer_id: &writer_id, epoch, ignorable,
                        turn_id: turn.as_deref(), step_id: step.as_deref(),
                        prev: Some(&prev) };
        let bytes = self.write_envelope(&env, clear.as_deref().unwrap_or(&text), &sealed);
        drop(env);
        self.text = text;
        Ok((event, Some(PyBytes::new(py, &bytes))))
    }
}

/// Event's slots in the order CPython lays them out (sorted names: events.Event).
pub(super) const SLOT_ORDER: [&str; 18] = [
    "_data", "_raw", "_text", "event_id", "format_version", "ignorable", "lossless_checked",
    "prev_event_id", "sealed", "seq", "session_id", "source_event_seqs", "step_id",
    "surface_op", "time", "turn_id", "type", "writer",
];

impl Bound_ {
    fn object_new<'py>(&self, py: Python<'py>, cls: &Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let cls = cls.bind(py).downcast::<pyo3::types::PyType>()?.clone();
        // object.__new__(Event): tp_alloc'd, every slot NULL, __init__ not run.
        // SAFETY: PyType_GenericAlloc on a live heap type; NULL is checked.
        unsafe {
            let obj = pyo3::ffi::PyType_GenericAlloc(cls.as_ptr().cast(), 0);
            Bound::from_owned_ptr_or_err(py, obj)
        }
    }
}

/// The slot offsets of `cls` if its layout is object's header followed by exactly
/// SLOT_ORDER's slots, 8 bytes each (checked by writing a sentinel through each
/// offset of a probe and reading it back through the slot's descriptor), else None.
pub(super) fn verified_layout(py: Python<'_>, cls: &Bound<'_, PyAny>) -> PyResult<Option<Vec<usize>>> {
    let word = std::mem::size_of::<*mut pyo3::ffi::PyObject>();
    let object = PyModule::import(py, "builtins")?.getattr("object")?;
    let head: usize = object.getattr("__basicsize__")?.extract()?;
    let size: usize = cls.getattr("__basicsize__")?.extract()?;
    let mut names: Vec<String> = cls.getattr("__slots__")?.extract()?;
    names.sort();
    if size != head + word * SLOT_ORDER.len() || names != SLOT_ORDER
        || !cls.getattr("__dictoffset__")?.extract::<isize>().map(|d| d == 0)?
        || !cls.getattr("__weakrefoffset__")?.extract::<isize>().map(|d| d == 0)? {
        return Ok(None);
    }
    let offsets: Vec<usize> = (0..SLOT_ORDER.len()).map(|i| head + word * i).collect();
    let probe = {
        let cls_t = cls.downcast::<pyo3::types::PyType>()?;
        // SAFETY: as in object_new.
        unsafe {
            Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyType_GenericAlloc(cls_t.as_ptr().cast(), 0))?
        }
    };
    let sentinels: Vec<Bound<'_, PyAny>> = (0..SLOT_ORDER.len())
        .map(|i| PyString::new(py, &format!("sentinel-{i}")).into_any()).collect();
    // SAFETY: the probe is a fresh instance of cls, basicsize covers every offset.
    unsafe {
        let base = probe.as_ptr() as *mut u8;
        for (v, off) in sentinels.iter().zip(offsets.iter()) {
            *(base.add(*off) as *mut *mut pyo3::ffi::PyObject) = v.clone().into_ptr();
        }
    }
    let getter = object.getattr("__getattribute__")?;
    for (name, v) in SLOT_ORDER.iter().zip(sentinels.iter()) {
        if !getter.call1((&probe, *name))?.is(v) {
            return Ok(None);
        }
    }
    Ok(Some(offsets))
}

/// Why `stamp` stopped: declined (no change made), or a Python error to raise.
enum Stop {
    Decline,
    Raise(PyErr),
}

impl From<Decline> for Stop {
    fn from(_: Decline) -> Self {
        Stop::Decline
    }
}

fn exact_text(obj: &Bound<'_, PyAny>) -> R<String> {
    if !obj.is_exact_instance_of::<PyString>() {
        return Err(Decline);
    }
    obj.downcast::<PyString>().map_err(|_| Decline)?.to_str().map(str::to_owned)
        .map_err(|_| Decline)
}

/// Random bytes for event ids (16 per id) and nonces, drawn 4 KiB at a time (cleared in a forked
/// child by `after_fork`, so a child never repeats its parent's ids).
static RANDOM: Mutex<(Vec<u8>, usize)> = Mutex::new((Vec::new(), 0));

pub(super) fn after_fork() {
    if let Ok(mut r) = RANDOM.lock() {
        r.0.clear();
        r.1 = 0;
    }
}

/// `n` (<= 4096) bytes from the operating system's random source, through the buffer.
pub(super) fn random_bytes(n: usize) -> Vec<u8> {
    let mut r = RANDOM.lock().unwrap_or_else(|e| e.into_inner());
    if r.1 + n > r.0.len() {
        let mut fresh = vec![0u8; 4096.max(n)];
        getrandom::getrandom(&mut fresh).expect("the operating system's random source");
        *r = (fresh, 0);
    }
    let at = r.1;
    r.1 = at + n;
    r.0[at..at + n].to_vec()
}

pub(super) fn uuid4() -> String {
    let mut b = [0u8; 16];
    b.copy_from_slice(&random_bytes(16));
    b[6] = (b[6] & 0x0F) | 0x40; // version 4
    b[8] = (b[8] & 0x3F) | 0x80; // RFC 4122 variant
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(HEX[(x >> 4) as usize] as char);
        s.push(HEX[(x & 0xF) as usize] as char);
    }
    s
}
