"""Area and delay of a prefix adder from logic synthesis: Yosys's ABC and a real cell library.

A graph is written as Verilog (`netlist.to_verilog`), read by Yosys (pyosys, from PyPI:
Yosys with ABC linked in) and mapped by ABC onto a Liberty library (by default `LIBERTY`,
15 cells of SkyWater's SKY130 high-density library that come with the package, see
`cells/README.md`); ABC's `stime` reports the mapped area (library units, um^2) and the
critical-path delay (ps).

The flow must preserve the graph's structure. ABC's default scripts (`map` after `dch`,
`resyn2`, ...) restructure the logic until every adder comes out alike, so a reward would no
longer depend on the action. The default `FLOW` only hashes the netlist into an AIG as it is
(`strash`, no rewriting) and maps it with `&nf`; the test suite checks that Kogge-Stone,
Sklansky, Brent-Kung and ripple keep their known order in delay and area at 32 bits.

Yosys ends its process on an error and keeps global state, so it never runs in the caller's
process: each thread that synthesises drives a Yosys process of its own (`YosysProcess`,
started on its first synthesis and kept for the next ones), which also bounds each
synthesis by `SynthesisSpec.timeout_s`.

Costs depend on the Yosys version, the flow and the library: `SynthesisSpec.record` names
them (pyosys version, library file name and SHA-256, flow), synthesis caches and run
directories keep it, and a cache written under another record is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from experiments.prefix.netlist import to_verilog

LIBERTY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cells",
                       "sky130_fd_sc_hd__tt_025C_1v80__prefix.lib")
FLOW = "strash; &get -n; &nf; &put; topo; stime"
PIP_PACKAGE = "pyosys"
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "yosys_server.py")
START_TIMEOUT_S = 60.0  # a Yosys process loads pyosys (about 0.3 s) before its first synthesis
_STIME = re.compile(r"Area\s*=\s*([0-9.eE+-]+).*?Delay\s*=\s*([0-9.eE+-]+)\s*ps", re.DOTALL)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SynthesisUnavailable(ValueError):
    """pyosys or the cell library is missing; the message says what to install."""


class SynthesisError(RuntimeError):
    """Yosys or ABC failed, timed out, or did not report an area and a delay."""


class SynthesisResult(NamedTuple):
    area: float  # mapped cell area, library units (um^2 for SKY130)
    delay: float  # critical path, ps
    seconds: float  # wall time of the synthesis


def pyosys_version() -> str | None:
    """The installed pyosys distribution's version (Yosys's release), or None; read from
    its metadata, without loading Yosys into this process."""
    try:
        return importlib.metadata.version(PIP_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def file_sha256(path: str) -> str:
    """SHA-256 of a file's bytes (hashed again only when its size or time changes)."""
    stat = os.stat(path)
    return _file_sha256(path, stat.st_size, stat.st_mtime_ns)


@dataclasses.dataclass(frozen=True)
class SynthesisSpec:
    """How to synthesise: the toolchain (`pyosys <version>`), the Liberty file and the ABC flow.

    `record` names what the costs depend on, `identity` hashes it for cache keys: a cached
    cost is reused only for the same graph, toolchain, library and flow.
    """

    toolchain: str
    liberty: str = LIBERTY
    flow: str = FLOW
    timeout_s: float = 120.0

    def record(self) -> dict[str, str]:
        """`{"toolchain", "liberty", "liberty_sha256", "flow"}`: what every machine that
        computes the same costs shares (the library by its file name and content)."""
        return {"toolchain": self.toolchain, "liberty": os.path.basename(self.liberty),
                "liberty_sha256": file_sha256(self.liberty), "flow": self.flow}

    @property
    def identity(self) -> str:
        return hashlib.sha256(json.dumps(self.record(), sort_keys=True).encode()).hexdigest()[:16]


def find_synthesis(liberty: str | None = None, flow: str = FLOW) -> SynthesisSpec:
    """The synthesis this installation runs: pyosys and `liberty` (default `LIBERTY`).

    Args:
        liberty: a Liberty file; None: the library that comes with the package.
        flow: the ABC script run after reading the netlist and the library.

    Returns:
        The `SynthesisSpec`; SynthesisUnavailable (one line saying what to install) when
        pyosys or the library is missing.
    """
    version = pyosys_version()
    liberty = LIBERTY if liberty is None else liberty
    if version is None:
        raise SynthesisUnavailable(f"synthesis rewards need Yosys from PyPI, and {PIP_PACKAGE} is not installed: "
                                   f"pip install {PIP_PACKAGE} (or reinstall podracer)")
    if not os.path.isfile(liberty):
        raise SynthesisUnavailable(f"the cell library {liberty} is missing (it comes with the podracer package: "
                                   "reinstall podracer)")
    return SynthesisSpec(f"{PIP_PACKAGE} {version}", liberty, flow)


def synthesis_available() -> bool:
    """Whether `find_synthesis()` finds pyosys and the cell library."""
    try:
        find_synthesis()
    except SynthesisUnavailable:
        return False
    return True


class YosysProcess:
    """A Yosys process (`yosys_server.py` under this Python) and the directory it works in.

    `run` sends it commands and returns their log; an error or a timeout ends the process
    and raises SynthesisError with the end of Yosys's log. Not shared between threads
    (`yosys_process()` keeps one per thread).
    """

    def __init__(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.directory = tempfile.mkdtemp(prefix="podracer-yosys-")
        self._log = os.path.join(self.directory, "yosys.log")
        self._stderr = open(os.path.join(self.directory, "stderr.txt"), "w+b")  # noqa: SIM115 (closed by close)
        self._process = subprocess.Popen([sys.executable, SERVER, self._log], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._stderr, cwd=self.directory)
        self._finalizer = weakref.finalize(self, _stop, self._process, self._stderr, self.directory)
        self.version = self._answer(timeout_s, "starting")["yosys"]

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._finalizer.alive and self._process.poll() is None

    def run(self, commands: Sequence[Sequence[str]], timeout_s: float) -> str:
        """Yosys's log of `commands` (lists of words) run on a new design."""
        try:
            self._process.stdin.write((json.dumps([list(c) for c in commands]) + "\n").encode())
            self._process.stdin.flush()
        except OSError:
            pass  # the process has ended: `_answer` reports why
        return self._answer(timeout_s, "its commands")["log"]

    def _answer(self, timeout_s: float, what: str) -> dict[str, Any]:
        stdout = self._process.stdout
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        if not ready:
            self.close()
            raise SynthesisError(f"Yosys did not finish {what} within {timeout_s:g} s (SynthesisSpec.timeout_s "
                                 "bounds a synthesis)")
        line = stdout.readline()
        if not line:
            code = self._process.wait()
            message = self._failure()
            self.close()
            raise SynthesisError(f"Yosys exited with status {code} during {what}: {message}")
        return json.loads(line)

    def _failure(self) -> str:
        """The end of what Yosys logged and printed, on one line."""
        text = ""
        for path in (self._log, self._stderr.name):
            try:
                with open(path, errors="replace") as f:
                    text += f.read()[-2000:]
            except OSError:
                continue
        lines = [line.strip() for line in _ANSI.sub("", text).splitlines() if line.strip()]
        errors = [line for line in lines if "ERROR" in line or "rror:" in line]
        return " | ".join((errors or lines)[-3:])[-400:] or "no output"

    def close(self) -> None:
        """End the process and remove its directory."""
        self._finalizer()


def _stop(process: subprocess.Popen, stderr: Any, directory: str) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout, stderr):
        try:
            stream.close()
        except OSError:
            pass
    shutil.rmtree(directory, ignore_errors=True)


_LOCAL = threading.local()


def yosys_process() -> YosysProcess:
    """This thread's Yosys process, started when missing or ended by an error."""
    process = getattr(_LOCAL, "process", None)
    if process is None or not process.alive:
        process = _LOCAL.process = YosysProcess()
    return process


def run_yosys(commands: Sequence[Sequence[str]], files: Mapping[str, str] | None = None,
              timeout_s: float = 120.0) -> str:
    """Run Yosys commands in this thread's Yosys process.

    Args:
        commands: Yosys commands, each a list of words; `{dir}` in a word is the directory
            `files` are written to.
        files: file name -> text, written to that directory first.
        timeout_s: the most seconds to wait for the log.

    Returns:
        Yosys's log of the commands (ABC's output included); SynthesisError when Yosys
        fails or times out.
    """
    process = yosys_process()
    for name, text in (files or {}).items():
        with open(os.path.join(process.directory, name), "w") as f:
            f.write(text)
    commands = [[word.replace("{dir}", process.directory) for word in command] for command in commands]
    return _ANSI.sub("", process.run(commands, timeout_s))


def synthesis_commands(spec: SynthesisSpec) -> list[list[str]]:
    """Read `{dir}/adder.v`, make its gates Yosys's gate cells (`simplemap`: one cell per
    gate), and map them with ABC's `spec.flow` onto `spec.liberty`."""
    return [["read_verilog", "{dir}/adder.v"], ["simplemap"],
            ["abc", "-liberty", os.path.abspath(spec.liberty), "-script", "+" + spec.flow]]


def run_synthesis(verilog: str, spec: SynthesisSpec) -> str:
    """Yosys's log (ABC's output in it) of `spec`'s synthesis of a Verilog module."""
    return run_yosys(synthesis_commands(spec), {"adder.v": verilog}, spec.timeout_s)


def parse_stime(output: str) -> tuple[float, float]:
    """`(area, delay_ps)` of the last `stime` report in ABC's output."""
    matches = _STIME.findall(output)
    if not matches:
        raise SynthesisError(f"no area/delay in ABC's output: {output.strip()[-300:]}")
    area, delay = matches[-1]
    return float(area), float(delay)


def synthesize(nodes: np.ndarray, spec: SynthesisSpec) -> SynthesisResult:
    """Synthesise one legal graph: its mapped area and delay. Runs in a reward worker (a
    top-level function, so a process pool can pickle it)."""
    start = time.perf_counter()
    area, delay = parse_stime(run_synthesis(to_verilog(np.asarray(nodes, bool)), spec))
    return SynthesisResult(area, delay, time.perf_counter() - start)
