//! Avro single-object decoding of the event envelope, by schema fingerprint.
//!
//! Wire form (ADR 0002): `C3 01`, the 8-byte CRC-64-AVRO fingerprint of the writer
//! schema, the schemaless Avro body. The Python codec computes the fingerprints of the
//! `.avsc` files it ships and hands them in with their version number; this module
//! knows the field layout of each version it supports and refuses (returns `None`)
//! what it cannot read, so the caller falls back to the Python codec, which names
//! the error. A new envelope version is one more arm in `Layout` and `read_body`.

use foldhash::{HashMap, HashMapExt};

pub const MAGIC: [u8; 2] = [0xC3, 0x01];
pub const HEADER_LEN: usize = 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// session_event.v1.avsc
    V1,
    /// session_event.v2.avsc: v1 + prev_event_id (admission's history link) + sealed
    /// (AES-256-GCM parts, opened by crate::crypto)
    V2,
}

impl Layout {
    pub fn of_version(version: u32) -> Option<Layout> {
        match version {
            1 => Some(Layout::V1),
            2 => Some(Layout::V2),
            _ => None,
        }
    }
}

/// One decoded envelope; strings borrow from the record bytes.
#[derive(Debug)]
#[allow(dead_code)]
pub struct Envelope<'a> {
    pub format_version: i64,
    pub session_id: &'a str,
    pub seq: i64,
    pub event_id: &'a str,
    pub time: i64,
    pub etype: &'a str,
    pub data: &'a str,
    pub surface_op: u8, // 0 none, 1 append, 2 replace
    pub source_event_seqs: Vec<i64>,
    pub writer_id: &'a str,
    pub writer_epoch: i64,
    pub ignorable: bool,
    pub turn_id: Option<&'a str>,
    pub step_id: Option<&'a str>,
    pub prev_event_id: Option<&'a str>,
    pub sealed: Vec<SealedRef<'a>>,
}

/// One item of `sealed`, borrowed from the record bytes.
#[derive(Debug)]
pub struct SealedRef<'a> {
    pub data_class: &'a str,
    pub key_session: &'a str,
    pub origin_event_id: &'a str,
    pub paths: Vec<&'a str>,
    pub nonce: &'a [u8],
    pub ciphertext: &'a [u8],
}

/// The data classes a sealed part may name (`sessionstream.core.sealed.DataClass`);
/// another is a malformed part, which the Python codec dead-letters.
pub const DATA_CLASSES: [&str; 4] = ["raw", "surface", "business", "reasoning"];

pub struct Schemas {
    by_fp: HashMap<[u8; 8], Layout>,
}

impl Schemas {
    pub fn new(fingerprints: &[(Vec<u8>, u32)]) -> Schemas {
        let mut by_fp = HashMap::new();
        for (fp, version) in fingerprints {
            if fp.len() == 8 {
                if let Some(layout) = Layout::of_version(*version) {
                    let mut k = [0u8; 8];
                    k.copy_from_slice(fp);
                    by_fp.insert(k, layout);
                }
            }
        }
        Schemas { by_fp }
    }

    pub fn layouts(&self) -> usize {
        self.by_fp.len()
    }

    /// The envelope in `payload`, or None when this reader cannot decode it (unknown
    /// fingerprint, malformed body, trailing bytes): the Python codec then decides.
    pub fn decode<'a>(&self, payload: &'a [u8]) -> Option<Envelope<'a>> {
        if payload.len() < HEADER_LEN || payload[..2] != MAGIC {
            return None;
        }
        let mut fp = [0u8; 8];
        fp.copy_from_slice(&payload[2..HEADER_LEN]);
        let layout = *self.by_fp.get(&fp)?;
        let mut r = Reader { buf: payload, pos: HEADER_LEN };
        let env = match layout {
            Layout::V1 => read_v1(&mut r)?,
            Layout::V2 => read_v2(&mut r)?,
        };
        if r.pos != payload.len() {
            return None;
        }
        Some(env)
    }
}

fn read_v1<'a>(r: &mut Reader<'a>) -> Option<Envelope<'a>> {
    let format_version = r.int()?;
    let session_id = r.string()?;
    let seq = r.long()?;
    let event_id = r.string()?;
    let time = r.long()?;
    let etype = r.string()?;
    let data = r.string()?;
    let op = r.long()?;
    if !(0..=2).contains(&op) {
        return None;
    }
    let source_event_seqs = r.long_array()?;
    let writer_id = r.string()?;
    let writer_epoch = r.long()?;
    let ignorable = r.boolean()?;
    let turn_id = r.opt_string()?;
    let step_id = r.opt_string()?;
    Some(Envelope {
        format_version,
        session_id,
        seq,
        event_id,
        time,
        etype,
        data,
        surface_op: op as u8,
        source_event_seqs,
        writer_id,
        writer_epoch,
        ignorable,
        turn_id,
        step_id,
        prev_event_id: None,
        sealed: Vec::new(),
    })
}

fn read_v2<'a>(r: &mut Reader<'a>) -> Option<Envelope<'a>> {
    let mut env = read_v1(r)?;
    env.prev_event_id = r.opt_string()?;
    // sealed: array of SealedPart {data_class, key_session, origin_event_id: string,
    // paths: array<string>, nonce, ciphertext: bytes}
    loop {
        let mut count = r.long()?;
        if count == 0 {
            break;
        }
        if count < 0 {
            count = count.checked_neg()?;
            r.long()?;
        }
        if count as usize > r.buf.len() {
            return None;
        }
        for _ in 0..count {
            let data_class = r.string()?;
            if !DATA_CLASSES.contains(&data_class) {
                return None;
            }
            let key_session = r.string()?;
            let origin_event_id = r.string()?;
            let mut paths = Vec::new();
            loop {
                let mut n = r.long()?;
                if n == 0 {
                    break;
                }
                if n < 0 {
                    n = n.checked_neg()?;
                    r.long()?;
                }
                if n as usize > r.buf.len() {
                    return None;
                }
                for _ in 0..n {
                    paths.push(r.string()?);
                }
            }
            let nonce = r.bytes()?;
            let ciphertext = r.bytes()?;
            env.sealed.push(SealedRef { data_class, key_session, origin_event_id, paths,
                                        nonce, ciphertext });
        }
    }
    Some(env)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn long(&mut self) -> Option<i64> {
        let mut n: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
            if shift >= 64 {
                return None;
            }
            n |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        Some(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    fn int(&mut self) -> Option<i64> {
        let v = self.long()?;
        if v < i32::MIN as i64 || v > i32::MAX as i64 {
            return None;
        }
        Some(v)
    }

    fn string(&mut self) -> Option<&'a str> {
        let len = self.long()?;
        if len < 0 {
            return None;
        }
        let len = len as usize;
        let end = self.pos.checked_add(len)?;
        let bytes = self.buf.get(self.pos..end)?;
        self.pos = end;
        std::str::from_utf8(bytes).ok()
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.long()?;
        if len < 0 {
            return None;
        }
        let end = self.pos.checked_add(len as usize)?;
        let b = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(b)
    }

    fn boolean(&mut self) -> Option<bool> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        match b {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn opt_string(&mut self) -> Option<Option<&'a str>> {
        match self.long()? {
            0 => Some(None),
            1 => Some(Some(self.string()?)),
            _ => None,
        }
    }

    fn long_array(&mut self) -> Option<Vec<i64>> {
        let mut out = Vec::new();
        loop {
            let mut count = self.long()?;
            if count == 0 {
                return Some(out);
            }
            if count < 0 {
                count = count.checked_neg()?;
                self.long()?; // block size in bytes
            }
            if count as usize > self.buf.len() {
                return None;
            }
            for _ in 0..count {
                out.push(self.long()?);
            }
        }
    }
}
