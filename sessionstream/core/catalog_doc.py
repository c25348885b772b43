"""Render the event catalog as Markdown.

``python -m sessionstream.core.catalog_doc > docs/events.md``.

A unit test checks docs/events.md is in sync with ``default_catalog()``.
"""

from __future__ import annotations

import textwrap

from sessionstream.core.catalog import F, Obj, default_catalog
from sessionstream.core.events import SurfaceOp


def _field(name: str, spec: F) -> str:
    kind = " or ".join(spec.kinds())
    if spec.items is not None:
        kind += f" of {' or '.join(spec.items.kinds())}"
    extra = f" one of {', '.join(map(str, spec.enum))}" if spec.enum else ""
    req = "" if spec.required else " (optional)"
    nested = ""
    if spec.obj is not None and spec.obj.fields:
        nested = " {" + ", ".join(spec.obj.fields) + "}"
    elif spec.items is not None and spec.items.obj is not None:
        nested = " {" + ", ".join(spec.items.obj.fields) + "}"
    return f"`{name}`: {kind}{extra}{nested}{req}"


def _fields(schema: Obj) -> str:
    return "<br>".join(_field(n, s) for n, s in schema.fields.items()) or "—"


def _wrap(text: str, indent: str, width: int = 88) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent)


def render() -> str:
    """The whole docs/events.md text."""
    out = [
        "# Event catalog",
        "",
        "Generated from `sessionstream.core.catalog.default_catalog()` by",
        "`python -m sessionstream.core.catalog_doc`; do not edit by hand.",
        "",
        "Scope: where the event may appear (`anywhere`, inside an open `turn`, inside an",
        "open `step`). Surface ops: how it may enter the model surface (`none` = never a",
        "message). Ignorable: a reader that does not know the type may skip it. Extra data",
        "fields are allowed and kept.",
        "",
        "## Envelope fields a hand-written log must carry",
        "",
        "* `surface_op`: an envelope read from a file or a record without `surface_op` reads",
        "  as `none`, and a type whose surface ops do not include `none` is then refused:",
        *_wrap(", ".join(f"`{t.name}`" for t in default_catalog()
                         if SurfaceOp.NONE not in t.surface_ops) + ".", "  "),
        "  Write it out (`\"surface_op\": \"append\"`). Only the writer API",
        "  (`Session.append`, `SessionWriter`) fills in a default: the first op listed below.",
        "* `turn_id` / `step_id`: every event inside an open turn carries that turn's id in",
        "  its envelope, and every event inside an open step also the step's id — not only",
        "  `turn/start` and `step/start`, but every event until `turn/end` / `step/end`",
        "  (these two included). An event without them, or with another turn's id, is",
        "  refused (`turn-mismatch`: \"turn_id should be '<id>'\", `step-mismatch`). Events",
        "  outside any turn carry neither. The writer API stamps them for you.",
        "",
        "## Types",
        "",
        "| type | scope | surface ops | ignorable | data fields | what it records |",
        "|---|---|---|---|---|---|",
    ]
    for t in default_catalog():
        ops = ", ".join(op.value for op in t.surface_ops)
        out.append(f"| `{t.name}` | {t.scope.value} | {ops} | {'yes' if t.ignorable else 'no'} "
                   f"| {_fields(t.schema)} | {t.description} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")
