"""The default shuffle window: 65,536 rows, or 256 MiB of decoded rows where that is fewer."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import ops
from stoker_testdata import digest, jpeg_bytes

DEFAULT_BYTES = 256 << 20
SIDE = 256  # decode_image(shape=[256, 256]): 196,608 bytes a row


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    rng = np.random.default_rng(5)
    blobs = [jpeg_bytes(rng, SIDE, SIDE) for _ in range(40)]
    path = str(tmp_path_factory.mktemp("window-images") / "img.parquet")
    pq.write_table(pa.table({"id": np.arange(40, dtype=np.int64), "image": pa.array(blobs, pa.binary())}),
                   path, row_group_size=10)
    return path


def footer_row_bytes(path):
    """The selected columns' uncompressed bytes per row, as the footers give them."""
    meta = pq.ParquetFile(path).metadata
    total = sum(meta.row_group(g).column(c).total_uncompressed_size
                for g in range(meta.num_row_groups) for c in range(meta.num_columns))
    return total // meta.num_rows


def image_loader(path, **kwargs):
    return stoker.Loader(path, columns=["id", "image"], batch_size=8, seed=3, drop_last=False,
                         transforms={"image": [ops.decode_image(shape=[SIDE, SIDE])]}, **kwargs)


def test_decoded_images_bound_the_default_window_by_bytes(images):
    row_bytes = SIDE * SIDE * 3 + footer_row_bytes(images)
    loader = image_loader(images)
    assert loader.shuffle_window_rows == DEFAULT_BYTES // row_bytes  # about 1,300, not 65,536
    # The resolved window is the one used: the same batches as that window given explicitly.
    assert digest(loader) == digest(image_loader(images, shuffle_window=loader.shuffle_window_rows))
    # Rows given are kept as given; a byte size is still converted with the footers' sizes.
    assert image_loader(images, shuffle_window="64MiB").shuffle_window_rows == \
        (64 << 20) // footer_row_bytes(images)
    assert image_loader(images, shuffle_window=65536).shuffle_window_rows == 65536


def test_small_rows_keep_65536_rows_and_their_resume_states(images):
    options = dict(columns=["id"], batch_size=8, seed=3)
    default = stoker.Loader(images, **options)
    assert default.shuffle_window_rows == 65536
    # The default hashes as the 65,536 rows it was: a state saved by either resumes in the other.
    it = iter(default)
    next(it)
    state = default.state_dict()
    explicit = stoker.Loader(images, shuffle_window=65536, **options)
    explicit.load_state_dict(state)
    rest = [np.array(b["id"], copy=True) for b in explicit]
    assert len(rest) == len(default) - 1


def test_a_state_saved_with_65536_image_rows_names_the_window(images):
    state = image_loader(images, shuffle_window=65536).state_dict()
    capped = image_loader(images)
    with pytest.raises(stoker.errors.StateMismatchError,
                       match=rf"shuffle_window \(saved 65536, now {capped.shuffle_window_rows}\)"):
        capped.load_state_dict(state)
    image_loader(images, shuffle_window=65536).load_state_dict(state)  # the advice, applied


def test_a_negative_window_is_refused(images):
    with pytest.raises(stoker.errors.InvalidOptionError, match="shuffle_window must be between 0"):
        stoker.Loader(images, columns=["id"], shuffle_window=-1)
