"""Row groups large enough that Arrow's record reader grows the decoded columns past 256 KiB,
where the recycling pool moves them into mappings that mremap grows (util/recycling_pool.h), and
hands a freed mapping to the next column that grows from the same size class. The values must be
pyarrow's in every epoch: a kept mapping grown in place once recorded its old size, and the next
growth moved only that many bytes (int64 columns read zeros from row 26,624 of some row groups).
"""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker

ROWS, GROUP = 200_000, 50_000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("large_groups")
    rng = np.random.default_rng(13)
    columns = {f"i{j:02d}": rng.integers(0, [10, 1000, 1 << 20][j % 3], ROWS, dtype=np.int64)
               for j in range(12)}
    columns.update({f"x{j:02d}": rng.standard_normal(ROWS, dtype=np.float32) for j in range(6)})
    table = pa.table(columns)
    for f in range(2):
        half = table.slice(f * ROWS // 2, ROWS // 2)
        pq.write_table(half, str(root / f"part-{f}.parquet"), row_group_size=GROUP)
    return str(root), table


@pytest.mark.parametrize("shuffle", [False, True])
def test_large_row_groups_read_pyarrows_values_every_epoch(dataset, shuffle):
    path, table = dataset
    names = table.column_names
    loader = stoker.Loader(path, columns=names, batch_size=4096, shuffle=shuffle, seed=5,
                           drop_last=False, num_threads=2, output="numpy")
    expected = {n: table[n].to_numpy() for n in names}
    for epoch in range(3):
        loader.set_epoch(epoch)
        got = {n: [] for n in names}
        for batch in loader:
            for n in names:
                got[n].append(batch[n].copy())
        got = {n: np.concatenate(v) for n, v in got.items()}
        if shuffle:  # the same rows in another order: put them back by a key column
            order = np.lexsort([got[n] for n in reversed(names)])
            want = np.lexsort([expected[n] for n in reversed(names)])
            got = {n: v[order] for n, v in got.items()}
            reference = {n: v[want] for n, v in expected.items()}
        else:
            reference = expected
        for n in names:
            bad = np.flatnonzero(got[n] != reference[n])
            assert bad.size == 0, (f"epoch {epoch}: column {n}: {bad.size} rows differ from "
                                   f"pyarrow's, from row {bad[0]}")
