"""The distribution installs every package of the tree, under the one import name."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.unit.layout import ROOT, package_dirs


def test_every_package_folder_is_in_the_wheel() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in package_dirs().items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            found.add(".".join((name, *parts)))
    assert found == listed


def test_one_import_name() -> None:
    assert {name.split(".")[0] for name in package_dirs()} == {"sessionstream"}


def test_the_install_built_the_native_extension() -> None:
    """`pip install` builds the native fold into the package: a checkout or wheel without it
    would silently run the ~7x slower Python reference."""
    from sessionstream import native

    assert native.available(), native.WHY_NOT
    assert native.ext.Folder is not None and native.ext.Appender is not None


def test_the_installed_extras_resolve_together() -> None:
    # the test extra pulls in every optional extra (faust, the three frameworks, the
    # provider SDKs): their pins must hold together, as a user installing them would need
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
