"""Area and delay of a prefix adder from logic synthesis: Yosys's ABC and a real cell library.

A graph is written as BLIF (`netlist.to_blif`) and mapped by `yosys-abc` onto a Liberty
library (by default OSU 0.18 um, Debian's `qflow-tech-osu018`); `stime` reports the mapped
area (library units, um^2) and the critical-path delay (ps).

The flow must preserve the graph's structure. ABC's default scripts (`map` after `dch`,
`resyn2`, ...) restructure the logic until every adder comes out alike, so a reward would no
longer depend on the action. The default `FLOW` only hashes the netlist into an AIG as it is
(`strash`, no rewriting) and maps it with `&nf`; the test suite checks that Kogge-Stone,
Sklansky, Brent-Kung and ripple keep their known order in delay and area at 32 bits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import NamedTuple

import numpy as np

from experiments.prefix.netlist import to_blif

APT_PACKAGES = "yosys qflow-tech-osu018"
LIBERTY_PATHS = ("/usr/share/qflow/tech/osu018/osu018_stdcells.lib",)
FLOW = "strash; &get -n; &nf; &put; topo; stime"
_STIME = re.compile(r"Area\s*=\s*([0-9.eE+-]+).*?Delay\s*=\s*([0-9.eE+-]+)\s*ps", re.DOTALL)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class SynthesisUnavailable(ValueError):
    """Yosys's ABC or the cell library is missing; the message names the apt packages."""


class SynthesisError(RuntimeError):
    """ABC failed, timed out, or did not report an area and a delay."""


class SynthesisResult(NamedTuple):
    area: float  # mapped cell area, library units (um^2 for OSU 0.18)
    delay: float  # critical path, ps
    seconds: float  # wall time of the synthesis


@dataclasses.dataclass(frozen=True)
class SynthesisSpec:
    """How to synthesise: the `yosys-abc` binary, the Liberty file and the ABC flow.

    `identity` names the flow and library (the library by its content's hash) for caches:
    a cached cost is reused only for the same graph, flow and library.
    """

    abc: str
    liberty: str
    flow: str = FLOW
    timeout_s: float = 120.0

    @property
    def identity(self) -> str:
        with open(self.liberty, "rb") as f:
            library = hashlib.sha256(f.read()).hexdigest()[:16]
        return hashlib.sha256(f"{self.flow}|{library}".encode()).hexdigest()[:16]


def find_synthesis(liberty: str | None = None, flow: str = FLOW) -> SynthesisSpec:
    """The installed synthesis tools; SynthesisUnavailable (one line naming the apt packages)
    when `yosys-abc` or the library is missing."""
    abc = shutil.which("yosys-abc")
    if liberty is None:
        liberty = next((path for path in LIBERTY_PATHS if os.path.exists(path)), None)
    if abc is None or liberty is None or not os.path.exists(liberty):
        missing = "yosys-abc" if abc is None else f"the cell library {liberty or LIBERTY_PATHS[0]}"
        raise SynthesisUnavailable(f"synthesis rewards need Yosys's ABC and a cell library, and {missing} is "
                                   f"missing: apt-get install {APT_PACKAGES}")
    return SynthesisSpec(abc, liberty, flow)


def synthesis_available() -> bool:
    try:
        find_synthesis()
    except SynthesisUnavailable:
        return False
    return True


def run_abc(blif: str, spec: SynthesisSpec) -> str:
    """ABC's output for `read_lib; read_blif; <flow>` on a BLIF text."""
    with tempfile.TemporaryDirectory(prefix="podracer-abc-") as tmp:
        path = os.path.join(tmp, "adder.blif")
        with open(path, "w") as f:
            f.write(blif)
        script = f"read_lib -w {spec.liberty}; read_blif {path}; {spec.flow}"
        try:
            result = subprocess.run([spec.abc, "-c", script], capture_output=True, text=True,
                                    timeout=spec.timeout_s, check=False, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise SynthesisError(f"yosys-abc did not finish within {spec.timeout_s:g} s "
                                 "(SynthesisSpec.timeout_s)") from None
    output = _ANSI.sub("", result.stdout + result.stderr)
    if result.returncode != 0:
        raise SynthesisError(f"yosys-abc exited with {result.returncode}: {output.strip()[-300:]}")
    return output


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
    area, delay = parse_stime(run_abc(to_blif(np.asarray(nodes, bool)), spec))
    return SynthesisResult(area, delay, time.perf_counter() - start)
