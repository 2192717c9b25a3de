"""Shared pytest fixtures: Parquet files written at test time by real writers, and batch readers.

Fixtures here are generic so any suite can use them:

- ``write_parquet(table, name=..., row_group_size=..., **kwargs)`` writes with pyarrow.
- ``write_duckdb(query_or_table, name=..., row_group_size=...)`` writes with DuckDB's own Parquet
  writer (``COPY ... TO ... (FORMAT PARQUET)``). DuckDB rounds row groups up to its vector size
  (2048 rows), so use a few thousand rows to get several row groups.
- ``load_batches(source, **loader_kwargs)`` returns every batch of one epoch as a list of dicts.

Layout (tests/README.md): tests/unit/<area>/ and tests/system/; the helpers here (conftest.py,
stoker_testdata.py, s3_fixtures.py, petastorm_fixtures.py, bench_testing.py) are importable from
every folder (pyproject.toml's ``pythonpath``).

For the S3 suites (tests/s3_fixtures.py has the servers):

- ``proxy``: a FaultProxy in front of the module's ``moto`` fixture (a MotoServer, e.g. from
  ``s3_fixtures.dataset_server``), closed after the test.
- ``s3_process``: moto and a FaultProxy in their own process (s3_fixtures.S3ServerProcess),
  serving the module's ``s3_data`` fixture (from ``s3_fixtures.dataset_folder``); one per test,
  killed after it. For shutdown and exit tests: it can stall, freeze or be killed (SIGKILL).
- ``hermetic_aws_env``: nothing from the machine's AWS environment or files reaches the SDK; a
  module turns it on with ``pytest.mark.usefixtures("hermetic_aws_env")``.

Parallel runs (``make test`` runs pytest-xdist with ``--dist loadgroup``): every server a fixture
starts binds an ephemeral loopback port and every file lives under ``tmp_path``, so tests may run
in any worker. pytest_collection_modifyitems below puts two kinds of tests into an ``xdist_group``
(run one after another, on one worker):

- ``spark``: every test that starts a local Spark (a JVM per process; kept to one worker);
- ``heavy``: tests that keep both cores busy by themselves (``slow``: torchrun, Lightning DDP,
  the short fuzz run, the bench studies; and the bench smoke runs, which run every system in
  subprocesses with a time limit): at most one of them runs at a time, next to light tests.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Union

import pyarrow as pa
import pyarrow.parquet as pq
import pytest


# Modules (paths under tests/, "/"-separated) whose tests run subprocess jobs that use every
# core, besides those marked slow.
_HEAVY_MODULES = {"system/test_bench_smoke.py", "system/test_bench_petastorm_smoke.py",
                  "system/test_bench_remote_smoke.py", "system/test_bench_pyworkers_smoke.py"}
_SPARK_MODULES = {"system/test_petastorm_spark.py"}
_TESTS = os.path.dirname(os.path.abspath(__file__))


def _module(item: pytest.Item) -> str:
    """The test's module as a path under tests/, e.g. "system/test_bench_smoke.py"."""
    return os.path.relpath(os.path.abspath(str(item.fspath)), _TESTS).replace(os.sep, "/")


def _xdist_group(item: pytest.Item) -> Optional[str]:
    module = _module(item)
    if module in _SPARK_MODULES or "spark" in item.name.lower():
        return "spark"
    if item.get_closest_marker("slow") is not None or module in _HEAVY_MODULES:
        return "heavy"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    for item in items:
        group = _xdist_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def _target(root, name: str) -> str:
    path = os.path.join(os.fspath(root), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


@pytest.fixture
def write_parquet(tmp_path) -> Callable[..., str]:
    """Writes a pyarrow Table (or dict of columns) with pyarrow; returns the file's path."""

    def write(table: Union[pa.Table, Dict[str, Any]], name: str = "data.parquet",
              row_group_size: Optional[int] = None, **kwargs: Any) -> str:
        if not isinstance(table, pa.Table):
            table = pa.table(table)
        path = _target(tmp_path, name)
        pq.write_table(table, path, row_group_size=row_group_size, **kwargs)
        return path

    return write


@pytest.fixture
def write_duckdb(tmp_path) -> Callable[..., str]:
    """Writes a SQL query's result (or a pyarrow Table) with DuckDB; returns the file's path.

    ``setup`` statements (e.g. ``CREATE TYPE``) run first on the same connection.
    """
    duckdb = pytest.importorskip("duckdb")

    def write(source: Union[str, pa.Table], name: str = "duck.parquet",
              row_group_size: Optional[int] = None, setup: tuple = ()) -> str:
        path = _target(tmp_path, name)
        con = duckdb.connect()
        try:
            for statement in setup:
                con.execute(statement)
            if isinstance(source, pa.Table):
                con.register("arrow_source", source)
                source = "SELECT * FROM arrow_source"
            options = "FORMAT PARQUET"
            if row_group_size is not None:
                options += f", ROW_GROUP_SIZE {int(row_group_size)}"
            escaped = path.replace("'", "''")
            con.execute(f"COPY ({source}) TO '{escaped}' ({options})")
        finally:
            con.close()
        return path

    return write


@pytest.fixture
def load_batches() -> Callable[..., List[Dict[str, Any]]]:
    """Runs one epoch of a stoker.Loader and returns its batches (the loader is closed after)."""
    import stoker

    def load(source: Any, **kwargs: Any) -> List[Dict[str, Any]]:
        with stoker.Loader(source, **kwargs) as loader:
            return list(loader)

    return load


@pytest.fixture
def proxy(moto):
    """A fault-injecting proxy in front of the module's ``moto`` server, closed after the test."""
    from s3_fixtures import FaultProxy

    p = FaultProxy(moto.host, moto.port)
    yield p
    p.close()


@pytest.fixture
def s3_process(s3_data, tmp_path):
    """moto + a fault proxy in their own process, serving the module's ``s3_data``; killed after
    the test. Its stderr goes to ``s3-server.log`` in the test's tmp_path."""
    from s3_fixtures import S3ServerProcess

    server = S3ServerProcess(s3_data.local_dir, s3_data.bucket, s3_data.prefix,
                             log_path=str(tmp_path / "s3-server.log"))
    yield server
    server.close()


@pytest.fixture
def hermetic_aws_env(monkeypatch, tmp_path) -> None:
    """No credentials, profile, region or config from the machine running the tests."""
    from s3_fixtures import isolate_aws_env

    isolate_aws_env(monkeypatch, tmp_path)
