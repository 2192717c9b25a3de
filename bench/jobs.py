"""One measurement in a fresh interpreter: the runner every bench module shares.

The child is ``python -m MODULE [FLAG] JOB_JSON`` (or ``... [FLAG] -`` with the job on stdin, for
jobs that hold storage credentials: a command line is readable by every user of the machine). It
prints its result as one line ``@@RESULT@@<json>``; the last such line is the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Mapping, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MARKER = "@@RESULT@@"
# Lines and characters of the child's stderr (its stdout when stderr is empty) kept in the reason
# of a failed job.
TAIL_LINES = 6
TAIL_CHARS = 900


def run_job(job: dict, module: str, flag: Optional[str] = None, *, timeout: float,
            stdin: bool = False, env: Optional[Mapping[str, str]] = None,
            pythonpath: Sequence[str] = (), marker: str = MARKER, timed: bool = False,
            check: bool = False) -> dict:
    """Runs ``python -m <module> [<flag>] <job as JSON>`` from the repository root and returns the
    dict of its last ``<marker>`` line, or ``{"status": "failed", "reason": ...}`` when it timed
    out or printed no result (the reason ends with the tail of its stderr).

    - ``stdin``: the job goes through stdin; the argument is then ``-`` after a flag, none without.
    - ``env``: variables set for the child unless this environment already sets them.
    - ``pythonpath``: folders put before the repository on the child's PYTHONPATH.
    - ``timed``: adds ``process_s`` (the child's wall time, start-up included) to a result.
    - ``check``: raises RuntimeError instead of returning a failed result.
    """
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join([*pythonpath, REPO, child_env.get("PYTHONPATH", "")])
    for key, value in (env or {}).items():
        child_env.setdefault(key, value)
    argv = [sys.executable, "-m", module] + ([flag] if flag else [])
    if not stdin:
        argv.append(json.dumps(job))
    elif flag:
        argv.append("-")
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, input=json.dumps(job) if stdin else None, capture_output=True,
                              text=True, timeout=timeout, cwd=REPO, env=child_env)
    except subprocess.TimeoutExpired:
        result = {"status": "failed", "reason": f"timed out after {timeout:.0f} s"}
    else:
        lines = [line for line in proc.stdout.splitlines() if line.startswith(marker)]
        if lines:
            result = json.loads(lines[-1][len(marker):])
            if timed:
                result["process_s"] = time.perf_counter() - started
        else:
            tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-TAIL_LINES:])
            result = {"status": "failed",
                      "reason": f"exit {proc.returncode}: " + tail[-TAIL_CHARS:]}
    if check and result.get("status") == "failed":
        raise RuntimeError(f"python -m {module} failed: {result.get('reason')}")
    return result

