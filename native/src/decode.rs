//! `Decoder`: event records to envelope tuples, for readers that need Python events
//! (the writer's read-back on resume): the Avro body is read here instead of by
//! fastavro, and the caller builds each event from its tuple (its data text parsed
//! with the Python codec's lossless rules, `codec.event_from_envelope`).
//!
//! What this reader does not take (not bytes, an unknown fingerprint, a malformed body
//! or trailing bytes, a format_version outside 1..=the build's, sealed parts) comes
//! back as None: the caller decodes that record with the Python codec, which gives
//! the event or names the error, exactly as before.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyTuple};

use crate::avro;

#[pyclass]
pub struct Decoder {
    schemas: avro::Schemas,
    format_version: i64,
}

#[pymethods]
impl Decoder {
    /// `fingerprints`: (8-byte CRC-64-AVRO fingerprint, N of session_event.vN.avsc);
    /// `format_version`: the newest envelope format this build reads.
    #[new]
    fn new(fingerprints: Vec<(Vec<u8>, u32)>, format_version: i64) -> Decoder {
        Decoder { schemas: avro::Schemas::new(&fingerprints), format_version }
    }

    /// Per value, (session_id, seq, event_id, time, type, data text, surface op 0/1/2,
    /// source_event_seqs, writer id, writer epoch, format_version, ignorable, turn_id,
    /// step_id, prev_event_id), or None where the Python codec must decide.
    fn decode(&self, py: Python<'_>, values: &Bound<'_, PyList>)
              -> PyResult<Vec<Option<Py<PyTuple>>>> {
        let mut out = Vec::with_capacity(values.len());
        for value in values.iter() {
            let Ok(b) = value.downcast::<PyBytes>() else {
                out.push(None);
                continue;
            };
            out.push(match self.schemas.decode(b.as_bytes()) {
                Some(env) if env.sealed.is_empty() && env.format_version >= 1
                             && env.format_version <= self.format_version => {
                    Some(envelope(py, &env)?)
                }
                _ => None,
            });
        }
        Ok(out)
    }
}

fn envelope(py: Python<'_>, e: &avro::Envelope<'_>) -> PyResult<Py<PyTuple>> {
    let t = PyTuple::new(py, [
        e.session_id.into_pyobject(py)?.into_any(),
        e.seq.into_pyobject(py)?.into_any(),
        e.event_id.into_pyobject(py)?.into_any(),
        e.time.into_pyobject(py)?.into_any(),
        e.etype.into_pyobject(py)?.into_any(),
        e.data.into_pyobject(py)?.into_any(),
        e.surface_op.into_pyobject(py)?.into_any(),
        PyTuple::new(py, &e.source_event_seqs)?.into_any(),
        e.writer_id.into_pyobject(py)?.into_any(),
        e.writer_epoch.into_pyobject(py)?.into_any(),
        e.format_version.into_pyobject(py)?.into_any(),
        PyBool::new(py, e.ignorable).to_owned().into_any(),
        e.turn_id.into_pyobject(py)?.into_any(),
        e.step_id.into_pyobject(py)?.into_any(),
        e.prev_event_id.into_pyobject(py)?.into_any(),
    ])?;
    Ok(t.unbind())
}
