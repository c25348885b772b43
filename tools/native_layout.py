"""Write ``native/src/layout.rs``: the Redis row field names and the sealed-value prefix the
extension uses, generated from their one owner, ``sessionstream.core.rows`` (the extension
never spells them itself; tests/unit/test_rows.py fails when the file is stale).
Usage: ``python tools/native_layout.py`` (rewrites the file)."""

from __future__ import annotations

from pathlib import Path

from sessionstream.core.rows import SEALED_PREFIX, SessionRow

TARGET = Path(__file__).resolve().parents[1] / "native" / "src" / "layout.rs"
#: Rust constant -> the value in sessionstream.core.rows.
CONSTANTS = {
    "VIEW": SessionRow.VIEW, "STATE": SessionRow.STATE,
    "STATE_VERSION": SessionRow.STATE_VERSION, "PARTS": SessionRow.PARTS,
    "PART": SessionRow.PART, "ADMISSION": SessionRow.ADMISSION, "META": SessionRow.META,
    "AS_OF_SEQ": SessionRow.AS_OF_SEQ, "AS_OF_OFFSET": SessionRow.AS_OF_OFFSET,
    "SEALED_PREFIX": SEALED_PREFIX,
}


def render() -> str:
    lines = ["//! The session row's field names and the sealed-value prefix, generated from",
             "//! sessionstream/core/rows.py by tools/native_layout.py: do not edit by hand.", ""]
    lines += [f"pub const {name}: &str = {value!r};".replace("'", '"')
              for name, value in CONSTANTS.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render(), encoding="utf-8")
    print(TARGET)
