"""A framework's own test suite, from the sdist of the installed version (fetched with
pip once into the cache; never committed), for the suites that run against our backends."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path


def unpacked_sdist(dist: str, cache_dir: Path) -> Path:
    """The unpacked sdist of the installed ``dist`` (its tests/, conftest and project
    files): downloaded once into ``cache_dir/frameworks/<dist>-<version>/``."""
    v = version(dist)
    home = cache_dir / "frameworks" / f"{dist}-{v}"
    done = home / ".unpacked"
    if done.exists():
        return Path(done.read_text(encoding="utf-8"))
    home.mkdir(parents=True, exist_ok=True)
    archives = sorted(home.glob(f"*-{v}.tar.gz"))
    if not archives:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", f"{dist}=={v}", "-d", str(home)],
                       check=True, timeout=300)
        archives = sorted(home.glob(f"*-{v}.tar.gz"))
    if len(archives) != 1:
        raise RuntimeError(f"expected one sdist of {dist}=={v} in {home}, found {archives}")
    with tarfile.open(archives[0]) as tar:
        top = tar.getmembers()[0].name.split("/", 1)[0]
        tar.extractall(home, filter="data")
    tree = home / top
    done.write_text(str(tree), encoding="utf-8")
    return tree
