"""The extension's stub (``sessionstream/_native.pyi``) names what the extension offers,
both ways: every class, function, method and attribute of the built extension is in the
stub and nothing else, and every function and method takes the parameters, by name and
in order, the stub gives it. The type checker reads the stub for every use of the
extension, so a drifted stub would type a boundary that is not there."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from sessionstream import native

pytestmark = pytest.mark.skipif(not native.available(), reason="the native extension is not built")

STUB = Path(__file__).resolve().parents[2] / "sessionstream" / "_native.pyi"
#: Classes the extension returns without exporting them under their name.
RETURNED_ONLY = {"DeliveryLog"}
#: Aliases of the stub (types, not members).
ALIASES = {"Envelope", "Stored"}


def stub() -> dict[str, ast.ClassDef | ast.FunctionDef]:
    tree = ast.parse(STUB.read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body
            if isinstance(node, ast.ClassDef | ast.FunctionDef)}


def params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs] if p.arg not in ("self",)]


def text_params(obj: Any) -> list[str] | None:
    """The parameter names the extension declares for ``obj`` (None: not callable)."""
    text = getattr(obj, "__text_signature__", None)
    if text is None:
        return None
    names = [p.strip().split("=")[0].lstrip("*") for p in text.strip("()").split(",")]
    return [n for n in names if n and n not in ("$self", "$cls", "/", "$type")]


def test_every_member_of_the_extension_is_in_the_stub_and_only_those() -> None:
    ext = native.ext
    public = {n for n in dir(ext) if not n.startswith("_")}
    declared = set(stub()) - RETURNED_ONLY
    assert public == declared
    for name, node in stub().items():
        if name in RETURNED_ONLY:
            continue
        obj = getattr(ext, name)
        if isinstance(node, ast.FunctionDef):
            assert text_params(obj) == params(node), name
            continue
        members = {n: m for n, m in vars(obj).items() if not n.startswith("_")}
        in_stub = {b.name: b for b in node.body if isinstance(b, ast.FunctionDef)
                   and not b.name.startswith("_")}
        assert set(members) == set(in_stub), name
        for member, fn in in_stub.items():
            got = text_params(getattr(obj, member))
            if got is not None:  # a method (a property has no signature)
                assert got == params(fn), f"{name}.{member}"
        init = next((b for b in node.body if isinstance(b, ast.FunctionDef)
                     and b.name == "__init__"), None)
        if init is not None:
            assert text_params(obj) == params(init), f"{name}()"


def test_the_named_results_are_what_the_extension_returns() -> None:
    from sessionstream.core import codec
    from sessionstream.core.events import FORMAT_VERSION

    folder = native.ext.Folder(codec.schema_fingerprints(), FORMAT_VERSION, [], [], {}, 64)
    out = folder.fold([], {}, set())
    assert isinstance(out, native.ext.FoldOut)
    assert (out.dead, out.native, out.handed, out.high, out.skipped, out.envelopes,
            out.unknown) == ([], [], [], {}, 0, {}, [])
