//! A sender's delivery reports, kept natively and taken in once per flush.
//!
//! One `DeliveryLog` is the `on_delivery` callback of every record a writer's sender
//! produces (no Delivery object or Python frame per record). librdkafka reports each
//! record once per copy produced; the log finds the event the record carries (its
//! `event_id`, read from the single-object Avro value: the header this log was made
//! with, then format_version, session_id, seq, event_id) and keeps, per event id,
//! the acknowledgement (partition, offset) or the failure. An acknowledgement of any
//! copy wins over a failure of another (a resent event is in the log if one copy is).
//! A failure calls the sender's `on_error(event_id, error)` at once (rare; it maps
//! the error and returns the Delivery it made, whose state is kept). A report whose
//! value it cannot read identifies no event: that event stays pending, so a flush
//! never confirms it (UnconfirmedEvents).
//!
//! producers/kafka.py uses it for writers on the native append path; the Delivery
//! object per record stays the reference (SESSIONSTREAM_APPEND=python).

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

enum Report {
    Ok { partition: i64, offset: i64 },
    Failed { delivery: Py<PyAny>, state: String },
}

#[pyclass(module = "sessionstream._native")]
pub struct DeliveryLog {
    header: Vec<u8>,
    reports: HashMap<String, Report>,
    reported: u64,
    unidentified: u64,
    ok_seen: bool,
    on_error: Option<Py<PyAny>>,
}

fn varint(b: &[u8], at: &mut usize) -> Option<i64> {
    let mut n: u64 = 0;
    let mut shift = 0;
    loop {
        let x = *b.get(*at)?;
        *at += 1;
        n |= ((x & 0x7F) as u64) << shift;
        if x & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    Some(((n >> 1) as i64) ^ -((n & 1) as i64))
}

fn string<'a>(b: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let n = usize::try_from(varint(b, at)?).ok()?;
    let s = b.get(*at..*at + n)?;
    *at += n;
    Some(s)
}

impl DeliveryLog {
    pub fn new(header: Vec<u8>) -> Self {
        DeliveryLog { header, reports: HashMap::new(), reported: 0, unidentified: 0,
                      ok_seen: false, on_error: None }
    }

    /// The event id a record's value carries.
    fn event_id_of(&self, value: &[u8]) -> Option<String> {
        if !value.starts_with(&self.header) {
            return None;
        }
        let mut at = self.header.len();
        varint(value, &mut at)?; // format_version
        string(value, &mut at)?; // session_id
        varint(value, &mut at)?; // seq
        let id = string(value, &mut at)?;
        std::str::from_utf8(id).ok().map(str::to_owned)
    }

}

/// One report, borrowing the log only around its own updates: the failure listener
/// runs with no borrow held (another thread may serve reports meanwhile).
fn report(slf: &Bound<'_, DeliveryLog>, err: &Bound<'_, PyAny>, msg: &Bound<'_, PyAny>)
    -> PyResult<()> {
    let py = slf.py();
    let value = msg.call_method0(pyo3::intern!(py, "value"))?;
    let eid = value.downcast::<PyBytes>().ok()
        .and_then(|v| slf.borrow().event_id_of(v.as_bytes()));
    let Some(eid) = eid else {
        slf.borrow_mut().unidentified += 1;
        return Ok(());
    };
    if err.is_none() {
        let partition: i64 = msg.call_method0(pyo3::intern!(py, "partition"))?.extract()?;
        let offset: i64 = msg.call_method0(pyo3::intern!(py, "offset"))?.extract()?;
        let mut log = slf.borrow_mut();
        log.reports.insert(eid, Report::Ok { partition, offset });
        log.ok_seen = true;
        return Ok(());
    }
    let on_error = {
        let log = slf.borrow();
        if matches!(log.reports.get(&eid), Some(Report::Ok { .. })) {
            return Ok(()); // another copy is in the log
        }
        log.on_error.as_ref().map(|f| f.clone_ref(py))
    };
    let Some(on_error) = on_error else { return Ok(()) };
    let delivery = on_error.bind(py).call1((eid.as_str(), err))?;
    let state: String = delivery.getattr(pyo3::intern!(py, "state"))?.str()?.to_str()?.to_owned();
    let mut log = slf.borrow_mut();
    if !matches!(log.reports.get(&eid), Some(Report::Ok { .. })) {
        log.reports.insert(eid, Report::Failed { delivery: delivery.unbind(), state });
    }
    Ok(())
}

#[pymethods]
impl DeliveryLog {
    // The failure listener is the sender's bound method and the sender holds this log:
    // a cycle the garbage collector must see through.
    fn __traverse__(&self, visit: pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        if let Some(f) = &self.on_error {
            visit.call(f)?;
        }
        for r in self.reports.values() {
            if let Report::Failed { delivery, .. } = r {
                visit.call(delivery)?;
            }
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.on_error = None;
        self.reports.clear();
    }

    /// The delivery callback (librdkafka's report of one record). Never raises: what
    /// it cannot read leaves the event pending.
    fn __call__(slf: &Bound<'_, Self>, err: &Bound<'_, PyAny>, msg: &Bound<'_, PyAny>) {
        if let Ok(mut log) = slf.try_borrow_mut() {
            log.reported += 1;
        }
        if report(slf, err, msg).is_err() {
            if let Ok(mut log) = slf.try_borrow_mut() {
                log.unidentified += 1;
            }
        }
    }

    /// `on_error(event_id, error) -> Delivery`: called for each failed report.
    fn set_on_error(&mut self, on_error: Py<PyAny>) {
        self.on_error = Some(on_error);
    }

    /// How many reports arrived (every copy of every record produced gets one).
    #[getter]
    fn reported(&self) -> u64 {
        self.reported
    }

    /// Reports whose value named no event (they leave their event pending).
    #[getter]
    fn unidentified(&self) -> u64 {
        self.unidentified
    }

    /// Whether an acknowledgement arrived since the last call.
    fn take_ok_seen(&mut self) -> bool {
        std::mem::replace(&mut self.ok_seen, false)
    }

    /// `None` (no report yet), `(partition, offset)` (acknowledged) or the failure's
    /// Delivery.
    fn get<'py>(&self, py: Python<'py>, event_id: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(match self.reports.get(event_id) {
            None => None,
            Some(Report::Ok { partition, offset }) => {
                Some((partition, offset).into_pyobject(py)?.into_any())
            }
            Some(Report::Failed { delivery, .. }) => Some(delivery.bind(py).clone()),
        })
    }

    /// Take in the acknowledgements of `event_ids` (produce order): each acknowledged
    /// one gets its offset in `offsets` and leaves `records`. Returns (taken, waiting:
    /// those neither acknowledged nor in `offsets`, partition, lowest and highest
    /// offset taken) — the partition and offsets None when nothing was taken.
    #[allow(clippy::type_complexity)]
    fn harvest<'py>(&self, py: Python<'py>, event_ids: &Bound<'py, PyList>,
                    offsets: &Bound<'py, PyDict>, records: &Bound<'py, PyDict>)
        -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>, Option<i64>, Option<i64>,
                     Option<i64>)> {
        let taken = PyList::empty(py);
        let waiting = PyList::empty(py);
        let (mut part, mut lo, mut hi) = (None, None::<i64>, None::<i64>);
        for eid in event_ids.iter() {
            let key = eid.downcast::<PyString>()?.to_str()?;
            if let Some(Report::Ok { partition, offset }) = self.reports.get(key) {
                offsets.set_item(&eid, *offset)?;
                if records.contains(&eid)? {
                    records.del_item(&eid)?;
                }
                part = Some(*partition);
                lo = Some(lo.map_or(*offset, |l| l.min(*offset)));
                hi = Some(hi.map_or(*offset, |h| h.max(*offset)));
                taken.append(&eid)?;
            } else if !offsets.contains(&eid)? {
                waiting.append(&eid)?;
            }
        }
        Ok((taken, waiting, part, lo, hi))
    }

    /// event_id -> state ("pending", "failed", "possibly-persisted") of every one of
    /// `event_ids` not acknowledged.
    fn unconfirmed<'py>(&self, py: Python<'py>, event_ids: &Bound<'py, PyList>)
        -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for eid in event_ids.iter() {
            let key = eid.downcast::<PyString>()?.to_str()?;
            match self.reports.get(key) {
                Some(Report::Ok { .. }) => {}
                None => out.set_item(&eid, "pending")?,
                Some(Report::Failed { state, .. }) => out.set_item(&eid, state.as_str())?,
            }
        }
        Ok(out)
    }

    /// Stop tracking `done` (their outcome was handled); returns `sent` without them.
    fn forget<'py>(&mut self, py: Python<'py>, sent: &Bound<'py, PyList>,
                   done: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let mut gone = HashSet::new();
        for eid in done.try_iter()? {
            let eid = eid?;
            let key = eid.downcast::<PyString>()?.to_str()?.to_owned();
            self.reports.remove(&key);
            gone.insert(key);
        }
        let kept = PyList::empty(py);
        for eid in sent.iter() {
            if !gone.contains(eid.downcast::<PyString>()?.to_str()?) {
                kept.append(&eid)?;
            }
        }
        Ok(kept)
    }
}
