"""Render the event catalog as Markdown.

``python -m sessionstream.core.catalog_doc > docs/events.md``.

A unit test checks docs/events.md is in sync with ``default_catalog()``.
"""

from __future__ import annotations

from sessionstream.core.catalog import F, Obj, default_catalog


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


def render() -> str:
    """The whole docs/events.md text."""
    out = [
        "# Event catalog",
        "",
        "Generated from `sessionstream.core.catalog.default_catalog()` by",
        "`python -m sessionstream.core.catalog_doc`; do not edit by hand.",
        "",
        "Scope: where the event may appear (`anywhere`, inside an open `turn`, inside an",
        "open `step`). Surface ops: how it may enter the model surface (the first is the",
        "default; `none` = never a message). Ignorable: a reader that does not know the",
        "type may skip it. Extra data fields are allowed and kept.",
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
