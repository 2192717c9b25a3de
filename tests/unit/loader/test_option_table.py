"""One list of options: the user guide's options table (docs/user-guide.md, "## Options"),
Loader's signature and the engine's option table (cpp/src/options/summary.cc, OptionTable) name
the same options, and each is in the options fingerprint exactly when the docs do not say it is
left out. Changing an option the engine builds changes the fingerprint exactly when the table
says it is fingerprinted."""

import inspect
import os
import re

import pytest

import stoker
from stoker import _stoker

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LEFT_OUT = re.compile(r"does not change the batches|not part of the options fingerprint", re.I)
PARTS = {"source", "storage", "columns", "order", "execution", "cache", "python"}


def documented():
    """{option: meaning} of the user guide's options table."""
    with open(os.path.join(ROOT, "docs", "user-guide.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Options\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `([a-z_]+)` \| .* \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def engine_table():
    return {name: (part, fingerprinted) for name, part, fingerprinted in _stoker.option_table()}


def test_docs_signature_and_engine_name_the_same_options():
    docs = set(documented())
    signature = set(inspect.signature(stoker.Loader.__init__).parameters) - {"self"}
    engine = set(engine_table())
    assert len(docs) > 30  # the table was found
    assert docs == signature, ("docs only:", sorted(docs - signature),
                               "signature only:", sorted(signature - docs))
    assert engine == signature, ("engine only:", sorted(engine - signature),
                                 "signature only:", sorted(signature - engine))
    assert {part for part, _ in engine_table().values()} <= PARTS


def test_docs_say_which_options_the_fingerprint_leaves_out():
    docs = documented()
    for name, (_, fingerprinted) in engine_table().items():
        said = bool(LEFT_OUT.search(docs[name]))
        assert said != fingerprinted, (
            f"{name}: the engine says fingerprinted={fingerprinted}, the docs "
            f"{'say' if said else 'do not say'} it is left out")


# Options BuildLoaderOptions sets: a value other than the default.
CHANGED = {
    "batch_size": 2, "shuffle": False, "shuffle_window": 7, "drop_last": False,
    "padding_mask": True, "num_threads": 3, "num_io_threads": 3, "prefetch_bytes": "1MiB",
    "task_bytes": "1MiB", "max_retries": 1, "retry_base_delay": 1.0, "cache_bytes": "1GiB",
    "cache_min_free_bytes": "2GiB", "allow_lossy_cast": True, "lists": "padded",
    "pad_value": 1, "fill_null": 0, "null_mask": True, "on_error": "zero", "time_unit": "s",
    "decimals": "float32", "storage_options": {"region": "x"},
}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_the_fingerprint_follows_the_table(name):
    base = _stoker.LoaderOptions()
    base.sources = ["s3://bucket/data"]  # storage_options need a remote source
    plain = _stoker.build_loader_options({}, base, False).fingerprint(True)
    changed = _stoker.build_loader_options({name: CHANGED[name]}, base, False).fingerprint(True)
    assert (changed != plain) == engine_table()[name][1], name
