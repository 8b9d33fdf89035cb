"""Write the prefix adders' cell library: a few SkyWater sky130_fd_sc_hd cells as Liberty.

    python tools/sky130_liberty.py SKY130_FD_SC_HD_GIT_DIR [--commit REV] [--out FILE]

The SkyWater library (github.com/google/skywater-pdk-libs-sky130_fd_sc_hd, Apache-2.0)
holds its timing as JSON, one file per cell and corner. This script assembles the typical
corner (tt, 25 C, 1.80 V) of the cells in `CELLS`, drive strength 1, into one Liberty file
with what ABC's mapper reads (units, delay templates, area, pin functions and
capacitances, delay and transition tables), and leaves out power, leakage and power pins.
The numbers are copied unchanged. The output is
`experiments/prefix/cells/sky130_fd_sc_hd__tt_025C_1v80__prefix.lib`; its header names
the commit it came from.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from typing import Any

CORNER = "tt_025C_1v80"
LIBRARY = "sky130_fd_sc_hd"
# Combinational cells an adder maps onto: inverter and buffer, NAND/NOR/AND/OR, XOR/XNOR,
# the and-or-invert / or-and-invert cells of a carry (g | p & g) and the majority gate.
CELLS = ("inv_1", "buf_1", "nand2_1", "nand3_1", "nor2_1", "nor3_1", "and2_1", "or2_1",
         "xor2_1", "xnor2_1", "a21oi_1", "o21ai_1", "a21o_1", "o21a_1", "maj3_1")
LIBRARY_KEYS = ("delay_model", "time_unit", "voltage_unit", "current_unit", "pulling_resistance_unit",
                "leakage_power_unit", "comp_attribute,capacitive_load_unit", "nom_process",
                "nom_temperature", "nom_voltage", "input_threshold_pct_fall", "input_threshold_pct_rise",
                "output_threshold_pct_fall", "output_threshold_pct_rise", "slew_lower_threshold_pct_fall",
                "slew_lower_threshold_pct_rise", "slew_upper_threshold_pct_fall",
                "slew_upper_threshold_pct_rise", "slew_derate_from_library", "default_max_transition",
                "default_fanout_load", "default_inout_pin_cap", "default_input_pin_cap",
                "default_output_pin_cap", "lu_table_template,del_1_7_7", f"operating_conditions,{CORNER}",
                "default_operating_conditions")
CELL_KEYS = ("area", "cell_footprint")
PIN_KEYS = ("direction", "function", "capacitance", "rise_capacitance", "fall_capacitance", "max_capacitance",
            "max_transition", "timing")
TIMING_TABLES = ("cell_rise", "cell_fall", "rise_transition", "fall_transition")


def git_json(git_dir: str, commit: str, path: str) -> dict[str, Any]:
    """A JSON file of the library's repository at `commit`."""
    text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout
    return json.loads(text)


def number(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def scalar(value: Any) -> str:
    """A simple attribute's value: numbers bare, words quoted where Liberty needs it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return number(value)
    text = str(value)
    return text if text.replace("_", "").isalnum() and not text[0].isdigit() else f'"{text}"'


def table(name: str, body: dict[str, Any], indent: str) -> list[str]:
    """A lookup table group, e.g. `cell_rise ("del_1_7_7") { index_1 (...); values (...); }`."""
    kind, template = name.split(",")
    lines = [f'{indent}{kind} ("{template}") {{']
    for key in ("index_1", "index_2"):
        if key in body:
            lines.append(f'{indent}  {key} ("{", ".join(number(v) for v in body[key])}");')
    rows = body["values"] if isinstance(body["values"][0], list) else [body["values"]]
    quoted = ", ".join('"' + ", ".join(number(v) for v in row) + '"' for row in rows)
    lines.append(f"{indent}  values ({quoted});")
    return lines + [f"{indent}}}"]


def group(key: str, body: dict[str, Any], indent: str) -> list[str]:
    """A named group (`pin ("A") { ... }`, `lu_table_template (del_1_7_7) { ... }`)."""
    kind, name = key.split(",")
    lines = [f"{indent}{kind} ({name}) {{"]
    for attr, value in body.items():
        if isinstance(value, list):
            lines.append(f'{indent}  {attr} ("{", ".join(number(v) for v in value)}");')
        else:
            lines.append(f"{indent}  {attr} : {scalar(value)};")
    return lines + [f"{indent}}}"]


def timing(arc: dict[str, Any], indent: str) -> list[str]:
    lines = [f"{indent}timing () {{"]
    for attr in ("related_pin", "timing_sense", "timing_type"):
        if attr in arc:
            lines.append(f'{indent}  {attr} : "{arc[attr]}";')
    for key, body in arc.items():
        if key.split(",")[0] in TIMING_TABLES:
            lines += table(key, body, indent + "  ")
    return lines + [f"{indent}}}"]


def pin(name: str, body: dict[str, Any], indent: str) -> list[str]:
    lines = [f'{indent}pin ("{name}") {{']
    for attr in PIN_KEYS:
        if attr not in body:
            continue
        if attr == "timing":
            arcs = body[attr] if isinstance(body[attr], list) else [body[attr]]
            for arc in arcs:
                lines += timing(arc, indent + "  ")
        else:
            lines.append(f"{indent}  {attr} : {scalar(body[attr])};")
    return lines + [f"{indent}}}"]


def cell(name: str, body: dict[str, Any]) -> list[str]:
    lines = [f'  cell ("{name}") {{']
    lines += [f"    {attr} : {scalar(body[attr])};" for attr in CELL_KEYS if attr in body]
    for key, value in body.items():
        if key.startswith("pin,"):
            lines += pin(key.split(",", 1)[1], value, "    ")
    return lines + ["  }"]


def library(git_dir: str, commit: str) -> str:
    """The Liberty text of `CELLS` at `commit`, with a header naming its origin."""
    full = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", commit], check=True,
                          capture_output=True, text=True).stdout.strip()
    attributes = git_json(git_dir, full, f"timing/{LIBRARY}__common.lib.json")
    attributes |= git_json(git_dir, full, f"timing/{LIBRARY}__{CORNER}.lib.json")
    lines = [
        "/* SkyWater SKY130 high-density standard cells (sky130_fd_sc_hd), typical corner",
        f"   {CORNER}: the cells {', '.join(CELLS)}.",
        "   Origin: https://github.com/google/skywater-pdk-libs-sky130_fd_sc_hd",
        f"   commit {full}: timing/{LIBRARY}__common.lib.json, timing/{LIBRARY}__{CORNER}.lib.json",
        f"   and each cell's cells/<cell>/{LIBRARY}__<cell>__{CORNER}.lib.json.",
        "   Copyright 2020 The SkyWater PDK Authors. Licensed under the Apache License, Version 2.0",
        "   (http://www.apache.org/licenses/LICENSE-2.0).",
        "   Modified: assembled into one Liberty file by tools/sky130_liberty.py, keeping units, delay",
        "   templates, areas, pin functions, capacitances and delay/transition tables unchanged, and",
        "   leaving out power, leakage and power pins. */",
        f"library ({LIBRARY}__{CORNER}) {{",
    ]
    for key in LIBRARY_KEYS:
        if key not in attributes:
            continue
        value = attributes[key]
        if key.startswith("comp_attribute,"):
            unit, scale = value[1], number(value[0])
            lines.append(f"  {key.split(',')[1]} ({scale}, {unit});")
        elif isinstance(value, dict):
            lines += group(key, value, "  ")
        else:
            lines.append(f"  {key} : {scalar(value)};")
    for name in CELLS:
        base = name.rsplit("_", 1)[0]
        full_name = f"{LIBRARY}__{name}"
        lines += cell(full_name, git_json(git_dir, full, f"cells/{base}/{full_name}__{CORNER}.lib.json"))
    return "\n".join(lines + ["}", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", help="a clone of google/skywater-pdk-libs-sky130_fd_sc_hd (its .git or bare dir)")
    parser.add_argument("--commit", default="HEAD")
    default_out = os.path.join(os.path.dirname(__file__), "..", "podracer", "envs", "prefix", "cells",
                               f"{LIBRARY}__{CORNER}__prefix.lib")
    parser.add_argument("--out", default=default_out)
    args = parser.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(library(args.git_dir, args.commit))


if __name__ == "__main__":
    main()
