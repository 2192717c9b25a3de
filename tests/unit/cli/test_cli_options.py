"""Every Loader option on the command line (`--option KEY=VALUE`, `--config FILE`), the same for
`stoker inspect` and `stoker bench`; transform ops written as calls; cache hits in `bench`.

The commands run as users run them: the console script in a subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stoker import ops
from stoker_testdata import jpeg_bytes

STOKER = os.path.join(os.path.dirname(sys.executable), "stoker")


def cli(*args, timeout=120):
    return subprocess.run([STOKER, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def ok(*args):
    result = cli(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """60 JPEGs of varied sizes, an int label, a city string and two float columns."""
    rng = np.random.default_rng(3)
    sizes = [(40 + 8 * (i % 5), 30 + 6 * (i % 3)) for i in range(60)]
    path = str(tmp_path_factory.mktemp("cli_images") / "images.parquet")
    pq.write_table(pa.table({
        "image": pa.array([jpeg_bytes(rng, w, h) for w, h in sizes], pa.binary()),
        "label": pa.array(np.arange(60) % 10, pa.int64()),
        "city": pa.array([["oslo", "lima", "kyiv"][i % 3] for i in range(60)]),
        "x": pa.array(rng.standard_normal(60).astype(np.float32)),
        "y": pa.array(rng.standard_normal(60).astype(np.float32)),
    }), path, row_group_size=20)
    return path


CHAIN_CALLS = ["decode_image()", "resize([32, 32])", "normalize(mean=0.5, std=0.25)", "to_chw"]
CHAIN_DICTS = [ops.decode_image(), ops.resize([32, 32]), ops.normalize(mean=0.5, std=0.25),
               ops.to_chw()]


def test_ops_written_as_calls_are_the_ops_functions():
    from stoker._cli_options import parse_op, parse_transforms

    assert parse_transforms({"image": CHAIN_CALLS}) == {"image": CHAIN_DICTS}
    # Dicts pass as they are; the two forms mix.
    assert parse_transforms({"image": [CHAIN_DICTS[0], "resize(size=[32, 32])"]}) == \
        {"image": CHAIN_DICTS[:2]}
    assert parse_op("random_resized_crop(224, scale=(0.5, 1.0))") == \
        ops.random_resized_crop(224, scale=(0.5, 1.0))
    assert parse_op("hash_bucket(1024)") == ops.hash_bucket(1024)


@pytest.mark.parametrize("op, needle", [
    ("decode_imag()", "unknown op 'decode_imag' (did you mean 'decode_image'?)"),
    ("resize([32, 32], bogus=1)", "bogus"),
    ("resize(size)", "argument 'size' is not a literal"),
    ("__import__('os')", "unknown op '__import__'"),
    ("resize(", "write it like a call"),
    (7, "an op is a string"),
])
def test_bad_ops_are_clear_errors(op, needle):
    from stoker._cli_inspect import CliError
    from stoker._cli_options import parse_op

    with pytest.raises(CliError) as raised:
        parse_op(op, "image")
    assert needle in str(raised.value) and "transforms['image']" in str(raised.value)


@pytest.mark.parametrize("text, key, value", [
    ("batch_size=256", "batch_size", 256),
    ("shuffle=false", "shuffle", False),
    ("prefetch_bytes=512MiB", "prefetch_bytes", "512MiB"),  # not JSON: the plain string
    ('columns=["a", "b"]', "columns", ["a", "b"]),
    ('categories={"city": "auto"}', "categories", {"city": "auto"}),
    ("fill_null=-1.5", "fill_null", -1.5),
    ("cache_dir=/tmp/a=b", "cache_dir", "/tmp/a=b"),
    ("features_name=", "features_name", ""),
])
def test_option_values_are_json_or_a_plain_string(text, key, value):
    from stoker._cli_options import parse_option

    assert parse_option(text) == (key, value)


def test_an_image_pipeline_benchmarked_and_inspected_from_the_command_line(images, tmp_path):
    chain = json.dumps({"image": CHAIN_CALLS})
    out = ok("bench", images, "--columns", "image,label", "--option", f"transforms={chain}",
             "-o", "batch_size=8", "--batches", "12", "--quiet")
    assert "96 rows in 12 batches" in out and "verdict: " in out
    # inspect takes the same options and shows what the chain makes of the column.
    report = json.loads(ok("inspect", images, "--columns", "image,label", "--json",
                           "--option", f"transforms={chain}"))
    image = {c["name"]: c for c in report["columns"]}["image"]
    assert image["dtype"] == "float32" and list(image["shape"]) == [3, 32, 32]
    # The dedicated --transforms flag is the same option, on both commands.
    out = ok("bench", images, "--columns", "image", "--transforms", chain, "--batch-size", "8",
             "--batches", "3", "--quiet")
    assert "24 rows in 3 batches" in out


def test_config_files_json_and_toml_give_the_same_loader(images, tmp_path):
    options = {"columns": ["image", "label", "city"], "batch_size": 10, "shuffle": False,
               "categories": {"city": "auto"}, "transforms": {"image": CHAIN_CALLS}}
    as_json = tmp_path / "loader.json"
    as_json.write_text(json.dumps(options))
    as_toml = tmp_path / "loader.toml"
    as_toml.write_text(
        'columns = ["image", "label", "city"]\nbatch_size = 10\nshuffle = false\n'
        '[categories]\ncity = "auto"\n'
        '[transforms]\nimage = ["decode_image()", "resize([32, 32])", '
        '"normalize(mean=0.5, std=0.25)", "to_chw"]\n')
    reports = [json.loads(ok("inspect", images, "--json", "--config", path))
               for path in (as_json, as_toml)]
    assert reports[0] == reports[1]
    columns = {c["name"]: c for c in reports[0]["columns"]}
    assert list(columns["image"]["shape"]) == [3, 32, 32]
    assert columns["city"]["dtype"] == "int64"  # categories: ids, not strings
    for path in (as_json, as_toml):
        out = ok("bench", images, "--config", path, "--batches", "4", "--quiet")
        assert "40 rows in 4 batches" in out
    # The command line overrides the file: flags and --option alike.
    assert "20 rows in 4 batches" in ok("bench", images, "--config", as_toml, "--batch-size",
                                        "5", "--batches", "4", "--quiet")
    assert "12 rows in 4 batches" in ok("bench", images, "--config", as_toml, "-o",
                                        "batch_size=3", "--batches", "4", "--quiet")


def test_feature_groups_and_categories_by_option(images):
    out = ok("bench", images, "-o", 'features={"dense": ["x", "y"], "ids": ["label", "city"]}',
             "-o", 'categories={"city": ["oslo", "lima"]}', "-o", 'features_dtype={"ids": "int64"}',
             "--batch-size", "10", "--batches", "3", "--quiet")
    assert "30 rows in 3 batches" in out
    report = json.loads(ok("inspect", images, "--json", "-o", 'categories={"city": "auto"}',
                           "--columns", "city"))
    assert report["columns"][0]["dtype"] == "int64"


@pytest.mark.parametrize("args, needle", [
    (["-o", "batch_sise=4"], "stoker.Loader has no option 'batch_sise' (did you mean "
                             "'batch_size'?)"),
    (["-o", "source=/x"], "the dataset is the URI argument"),
    (["--batch-size", "4", "-o", "batch_size=8"], "'batch_size' given twice"),
    (["-o", 'transforms={"image": ["decode_imag()"]}'], "unknown op 'decode_imag'"),
    (["-o", 'transforms=["decode_image()"]'], "expected a mapping"),
    (["--config", "CONFIG.yaml"], "expected a .json or .toml file"),
    (["--config", "LIST.json"], "expected a mapping of Loader options, got list"),
    (["--config", "BAD.toml"], "not valid TOML"),
    (["--config", "MISSING.json"], "MISSING.json"),
])
@pytest.mark.parametrize("command", ["inspect", "bench"])
def test_bad_options_exit_2_with_one_line(images, tmp_path, command, args, needle):
    (tmp_path / "CONFIG.yaml").write_text("batch_size: 4\n")
    (tmp_path / "LIST.json").write_text("[1, 2]")
    (tmp_path / "BAD.toml").write_text("batch_size = \n")
    files = {"CONFIG.yaml", "LIST.json", "BAD.toml", "MISSING.json"}
    args = [str(tmp_path / a) if a in files else a for a in args]
    result = cli(command, images, "--columns", "image", *args, "--batches", "1", "--quiet") \
        if command == "bench" else cli(command, images, "--columns", "image", *args)
    assert result.returncode == 2, result.stdout
    assert needle in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_the_loader_checks_the_values(images):
    result = cli("bench", images, "--columns", "label", "-o", "batch_size=0", "--batches", "1")
    assert result.returncode == 2 and "batch_size" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_option_is_an_argument_error():
    result = cli("bench", "x", "--option", "batch_size")
    assert result.returncode == 2 and "--option" in result.stderr and "KEY=VALUE" in result.stderr


def test_bench_prints_cache_hits_and_misses(images, tmp_path):
    cache = tmp_path / "cache"
    args = ["bench", images, "--columns", "image,label", "--transforms",
            json.dumps({"image": CHAIN_CALLS}), "--batch-size", "10", "--cache-dir", cache,
            "--quiet"]
    # Three epochs: the first misses every row group, the entries are written behind it.
    first = ok(*args, "--batches", "18")
    hits, misses = map(int, re.search(r"cache +hits ([\d,]+), misses ([\d,]+)", first).groups())
    assert misses >= 3
    # A second run on the same folder reads what the first one stored.
    second = ok(*args, "--batches", "6")
    hits, misses = map(int, re.search(r"cache +hits ([\d,]+), misses ([\d,]+)", second).groups())
    assert hits >= 1 and "hit rate" in second
