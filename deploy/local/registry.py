"""An optional local schema registry: Apicurio Registry on 127.0.0.1 (in-memory storage).

``sessionstream registry up|down|status`` starts it beside the local stack of
:mod:`sessionstream.localstack.stack`, on its own loopback ports, under ``<state dir>/registry``.
The ``confluent`` wire (``Settings.wire``) uses its Confluent-compatible API
(:attr:`LocalRegistry.url`). The distribution (a Quarkus fast-jar,
``io.apicurio:apicurio-registry-app``, classifier ``all``) is fetched with Maven on first
use and unpacked into ``<cache dir>/apicurio-<version>/``, like Kafka's jars. It needs
Java 21+: :func:`find_java` scans ``JAVA_HOME``, ``PATH`` and the system JVM directory.
Only the process started here (pid file + its state dir on the command line) is signalled.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sessionstream.core.settings import Settings
from sessionstream.localstack.stack import (
    Echo,
    LocalStackError,
    _alive,
    _cmdline,
    port_is_free,
    read_pid,
)

APICURIO_VERSION = "3.3.3"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
DEFAULT_PORT = 18081
DEFAULT_MANAGEMENT_PORT = 18082
JAVA_MIN = 21
JVM_DIR = Path("/usr/lib/jvm")  # the standard system JVM directory (Debian/Ubuntu, RHEL)
HEAP = "-Xmx256m"
START_TIMEOUT_S = 90.0


def java_major(java: Path) -> int | None:
    """The major version of a ``java`` executable (None: it does not run)."""
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True,
                             timeout=20).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def find_java(minimum: int = JAVA_MIN) -> Path | None:
    """A ``java`` of version >= ``minimum``: JAVA_HOME, then PATH, then the JVM directory."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path))
    if JVM_DIR.is_dir():
        candidates += sorted(JVM_DIR.glob("*/bin/java"), reverse=True)
    seen: set[Path] = set()
    for java in candidates:
        real = java.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        major = java_major(real)
        if major is not None and major >= minimum:
            return real
    return None


def apicurio_home(cache_dir: Path, echo: Echo = print) -> Path:
    """The unpacked Apicurio distribution (with ``quarkus-run.jar``), fetched on first use."""
    home = cache_dir / f"apicurio-{APICURIO_VERSION}"
    if (home / "quarkus-run.jar").is_file():
        return home
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalStackError("Maven is not installed (no `mvn` on PATH); it fetches Apicurio "
                              "Registry. Install: apt-get install -y maven")
    echo(f"registry: fetching Apicurio Registry {APICURIO_VERSION} with Maven (first run only)")
    proc = subprocess.run(
        [mvn, "-B", "-q", "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:get",
         f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise LocalStackError(f"Maven could not fetch {ARTIFACT} (exit {proc.returncode}):\n"
                              f"{tail}\nCheck network access to Maven Central.")
    tgz = (Path.home() / ".m2" / "repository" / "io" / "apicurio" / "apicurio-registry-app"
           / APICURIO_VERSION / f"apicurio-registry-app-{APICURIO_VERSION}-all.tar.gz")
    if not tgz.is_file():
        raise LocalStackError(f"Maven reported success but {tgz} is missing (a custom "
                              "localRepository in ~/.m2/settings.xml?)")
    partial = cache_dir / f"apicurio-{APICURIO_VERSION}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(tgz) as tar:
        tar.extractall(partial, filter="data")
    shutil.rmtree(home, ignore_errors=True)
    partial.rename(home)
    return home


@dataclass(frozen=True)
class LocalRegistry:
    """One local Apicurio Registry process: where it lives and which ports it uses."""

    state_dir: Path
    cache_dir: Path
    port: int = DEFAULT_PORT
    management_port: int = DEFAULT_MANAGEMENT_PORT

    @classmethod
    def from_settings(cls, settings: Settings, port: int = DEFAULT_PORT,
                      management_port: int = DEFAULT_MANAGEMENT_PORT) -> LocalRegistry:
        return cls(settings.state_dir / "registry", settings.cache_dir, port, management_port)

    @property
    def url(self) -> str:
        """The Confluent-compatible API (``Settings.schema_registry_url``)."""
        return f"http://127.0.0.1:{self.port}/apis/ccompat/v7"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "registry.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "registry.log"

    def pid(self) -> int | None:
        """The pid of the registry started here, if it still runs."""
        pid = read_pid(self.pid_file)
        if pid is None or not _alive(pid) or str(self.state_dir) not in _cmdline(pid):
            return None
        return pid

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/subjects", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def up(self, echo: Echo = print) -> bool:
        """Start it unless running; True when started now. Waits until it answers."""
        if self.pid() is not None:
            return False
        java = find_java()
        if java is None:
            raise LocalStackError(
                f"Apicurio Registry needs Java {JAVA_MIN}+; none found in JAVA_HOME, PATH or "
                f"{JVM_DIR}. Install e.g. openjdk-21-jre-headless and set JAVA_HOME")
        for p in (self.port, self.management_port):
            if not port_is_free(p):
                raise LocalStackError(f"registry: port {p} on 127.0.0.1 is in use; choose "
                                      "other ports (--port / --management-port)")
        home = apicurio_home(self.cache_dir, echo)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        cmd = [str(java), HEAP, f"-Dsessionstream.dir={self.state_dir}",
               "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={self.port}",
               "-Dquarkus.management.host=127.0.0.1",
               f"-Dquarkus.management.port={self.management_port}",
               "-jar", str(home / "quarkus-run.jar")]
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=self.state_dir,
                                    start_new_session=True)
        self.pid_file.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LocalStackError(f"registry exited with {proc.returncode} at start; "
                                      f"see {self.log_file}")
            if self.ready():
                echo(f"registry: running (pid {proc.pid}) at {self.url}")
                return True
            time.sleep(0.5)
        self.down()
        raise LocalStackError(f"registry did not answer within {START_TIMEOUT_S:.0f}s; see "
                              f"{self.log_file}")

    def down(self, timeout: float = 20.0) -> bool:
        """Stop the registry started here; True when one was stopped."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        return True

    def status(self) -> dict[str, object]:
        pid = self.pid()
        return {"name": "registry", "pid": pid, "port": self.port, "url": self.url,
                "ready": pid is not None and self.ready(), "log": str(self.log_file)}
