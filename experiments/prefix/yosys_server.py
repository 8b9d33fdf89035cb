"""A Yosys process for `experiments.prefix.synthesis`: runs Yosys commands through pyosys.

    python yosys_server.py LOG_PATH

Run as a script by `synthesis.YosysProcess` (it imports nothing but pyosys and the standard
library, so it runs from its path wherever the package lives). It answers one line on
stdout when pyosys has loaded, `{"yosys": <version>}`; then for each line on stdin, a JSON
list of Yosys commands (each a list of words), it runs them on a new design with their log
written to LOG_PATH (nothing on the console) and answers `{"log": <that log>}`. Yosys ends
the process on an error (exit status 1, the message in LOG_PATH and on stderr); its caller
reads both. End of stdin ends it.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    log_path = sys.argv[1]
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what Yosys or ABC prints goes to stderr
    flags = sys.getdlopenflags()
    from pyosys import libyosys  # sets RTLD_GLOBAL for every later import: restored below

    sys.setdlopenflags(flags)
    # ABC's library, converted once per process, kept beside the log rather than in a
    # directory shared by every Yosys of this user.
    libyosys.Pass.call(libyosys.Design(), ["libcache", "-scl", "-dir", os.path.dirname(os.path.abspath(log_path))])
    answers.write(json.dumps({"yosys": libyosys.yosys_maybe_version()}) + "\n")
    answers.flush()
    for line in sys.stdin:
        design = libyosys.Design()
        for k, command in enumerate(json.loads(line)):
            libyosys.Pass.call(design, ["tee", "-q", "-a" if k else "-o", log_path, *command])
        del design
        # Free the names the commands made (ABC's netlist has new ones every time): without
        # this the process grows by about 0.1 MB a synthesis.
        libyosys.request_garbage_collection()
        libyosys.try_collect_garbage()
        with open(log_path, errors="replace") as f:
            log = f.read()
        answers.write(json.dumps({"log": log}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
