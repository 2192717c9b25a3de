"""bench.ray_scaleout runs end to end on the tiny images workload: the local Loader and the
RayLoader with 1 and 2 actors (Ray Data's pipeline is left to the bench's own runs: its start-up
alone is ~15 s here), the hand-off on two simulated nodes, and the projection model. Structure,
row counts and byte equality only; never timing."""

import json

import pytest

from bench_testing import run_bench

try:
    import ray  # noqa: F401
    import ray.cluster_utils  # noqa: F401

    MISSING = None
except ImportError as error:  # ray is an optional dependency
    MISSING = f"ray is not installed: {error}"


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(MISSING is not None, reason=MISSING or "ok")
def test_ray_scaleout_bench_smoke(tmp_path):
    out = run_bench("bench.ray_scaleout", tmp_path, "--profile", "smoke",
                    "--configs", "local,ray_1,ray_2")
    report = json.load(open(out / "ray-scaleout-smoke.json"))
    rows = report["dataset"]["rows"]
    assert rows == 48
    assert list(report["configs"]) == ["local", "ray_1", "ray_2"]
    local = report["configs"]["local"]
    for name, config in report["configs"].items():
        assert config["status"] == "ok", (name, config)
        # two epochs (the second is the steady window), every row of each
        assert config["epoch_rows"] == [rows, rows] and config["batches"] == 3, (name, config)
        assert len(config["crcs"]) == 6 and config["steady_rows_per_s"] > 0
        # float32 [3, 224, 224] images plus an int64 label per row
        assert config["bytes"] == rows * (3 * 224 * 224 * 4 + 8)
        assert config["trainer_affinity"] == [report["settings"]["trainer_core"]]
        assert set(config["steady_cpu_ms_per_row"]) == {"trainer", "ray_workers", "ray_daemons"}
    for name in ("ray_1", "ray_2"):
        config = report["configs"][name]
        # batch i from the actors is byte-identical to the local Loader's batch i
        assert config["crcs"] == local["crcs"] and config["bytes_equal_to_local"] is True
        assert config["stats"]["num_actors"] == int(name[-1])
        assert sum(a["batches"] for a in config["stats"]["actors"]) == 6
        assert config["cpu_s"]["ray_workers"] > 0  # the actors' CPU is seen
    handoff = report["handoff"]
    assert handoff["status"] == "ok", handoff
    assert set(handoff["where"]) == {"same_node", "other_node"}
    for sizes in handoff["where"].values():
        assert set(sizes) == {"8 B", "1 MB", "10 MB", "batch"}
        assert sizes["batch"]["bytes"] == 16 * 3 * 224 * 224 * 4
        for value in sizes.values():
            assert value["round_trip_ms"] > 0 and value["get_ready_ms"] > 0
    model = report["model"]
    assert [r["actors"] for r in model["rows"]] == [1, 2, 8, 32]
    assert model["rows"][1]["measured_steady_rows_per_s"] > 0
    for r in model["rows"]:
        assert r["binding"] in r["terms"]
        assert r["predicted_rows_per_s"] == min(r["terms"].values())
    text = (out / "ray-scaleout-smoke.md").read_text()
    assert "| stoker.ray.RayLoader, 2 actors |" in text
    assert "## The object-store hand-off alone" in text and "| actors N |" in text
