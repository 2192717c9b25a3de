"""One measurement in a fresh process: ``python -m bench.worker JOB_JSON`` prints one JSON line.

A fresh process per measurement gives clean peak RSS and CPU accounting, and isolates a runner
that crashes or hangs (the parent enforces a timeout).
"""

from __future__ import annotations

import json
import math
import sys
import traceback


def run(job: dict) -> dict:
    from . import metrics
    from .runners import load

    runner = load(job["runner"])
    # Libraries load before the clock starts: time to first batch measures the loader only.
    import numpy  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    reason = runner.available()
    if reason:
        return {"status": "unavailable", "reason": reason}
    if hasattr(runner, "prepare"):
        runner.prepare(job)  # start-up that is not the loader's (e.g. ray.init)
    result = metrics.consume(runner.batches(job), step_s=job.get("step_s", 0.0),
                             max_batches=job.get("max_batches"))
    stats = getattr(runner, "stats", None)
    if stats is not None:
        try:
            result["loader_stats"] = stats(job)
        except Exception as error:  # noqa: BLE001
            result["loader_stats_error"] = str(error)
    result["status"] = "ok"
    return result


def measure(job: dict) -> dict:
    """run(), with a runner's errors turned into a result: Unavailable (a system that cannot run
    here) is 'unavailable' with its reason, anything else 'failed'."""
    from .runners import Unavailable

    try:
        return run(job)
    except Unavailable as error:
        return {"status": "unavailable", "reason": str(error)}
    except Exception as error:  # noqa: BLE001
        return {"status": "failed", "reason": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(limit=8)}


def main() -> int:
    job = json.loads(sys.argv[1])
    result = measure(job)
    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in result.items()}
    sys.stdout.write("\n@@RESULT@@" + json.dumps(clean) + "\n")
    sys.stdout.flush()
    # Shut the runner down only after the result is out: Ray's core worker may exit(1) the
    # process when an abandoned iterator touches it after ray.shutdown().
    try:
        from .runners import load

        runner = load(job["runner"])
        if hasattr(runner, "shutdown") and result.get("status") == "ok":
            runner.shutdown(job)
    except Exception:  # noqa: BLE001
        pass
    sys.stderr.flush()
    # Some peers leave non-daemon threads or pools behind; do not let them hang the exit.
    import os

    os._exit(0)


if __name__ == "__main__":
    main()
