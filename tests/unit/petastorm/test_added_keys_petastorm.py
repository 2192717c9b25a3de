"""Petastorm fields finished in Python (a varying first dimension made padded): their lengths
key is named by the engine's naming function, listed in ``loader.columns``, and refused when a
column has its name."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker._petastorm import column_infos
from stoker.errors import InvalidOptionError

import petastorm_fixtures as pf

pytestmark = pytest.mark.skipif(bool(pf.missing()), reason=pf.missing() or "ok")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("petastorm") / "everything")
    return pf.write_with_helpers(path, pf.everything_schema(), pf.everything_rows(16),
                                 row_group_rows=8, files=1)


def test_padded_fields_list_their_lengths(store):
    path = store[len("file://"):]
    with stoker.Loader(path, columns=["id", "var"], batch_size=8, shuffle=False,
                       lists="padded") as loader:
        assert loader.columns["var"].added_keys[0] == "var_lengths"
        batch = next(iter(loader))
        assert set(batch) == {key for name, info in loader.columns.items()
                              for key in [name, *info.added_keys]}
    with stoker.Loader(path, columns=["var"], batch_size=8, lists="ragged") as loader:
        assert "var_lengths" not in loader.columns["var"].added_keys


def test_lengths_clash_with_a_column(tmp_path):
    path = os.fspath(tmp_path / "clash.parquet")
    pq.write_table(pa.table({"v": pa.array([b"x"], pa.binary()),
                             "v_lengths": np.arange(1)}), path)
    with stoker.Loader(path, batch_size=1) as loader:
        columns = dict(loader.columns)
    with pytest.raises(InvalidOptionError,
                       match=r"output key 'v_lengths' for column 'v' clashes with a column of "
                             r"that name; leave 'v_lengths' out of columns, or "
                             r"lists=\{'v': 'ragged'\}"):
        column_infos(columns, {}, {"v": ("padded", None)})
