//! The session row's field names and the sealed-value prefix, generated from
//! sessionstream/core/rows.py by tools/native_layout.py: do not edit by hand.

pub const VIEW: &str = "view:";
pub const STATE: &str = "state:";
pub const STATE_VERSION: &str = "sv:";
pub const PARTS: &str = "parts:";
pub const PART: &str = "part:";
pub const ADMISSION: &str = "admission";
pub const META: &str = "meta";
pub const AS_OF_SEQ: &str = "as_of_seq";
pub const AS_OF_OFFSET: &str = "as_of_offset";
pub const SEALED_PREFIX: &str = "ss-aead1:";
