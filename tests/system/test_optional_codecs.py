"""A source build without the optional image codecs (issue 27; cmake/StokerCodecs.cmake).

The extension is configured with -DSTOKER_WITH_PNG=OFF -DSTOKER_WITH_WEBP=OFF in build/nocodecs
(as if libspng-dev and libwebp-dev were not installed) and built; the configure step names what
is missing, the module imports, JPEG decodes, and PNG and WebP bytes raise UnsupportedInputError
naming the missing library. Only cpp/src/transform/image_codec.cc sees the choice (through the
generated stoker_codecs.h), so with ccache the other sources are cache hits of `make wheel`'s.
"""

from __future__ import annotations

import glob
import io
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, "build", "nocodecs")
BIN = os.path.dirname(sys.executable)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def _tool(name: str) -> str:
    return os.path.join(BIN, name) if os.path.exists(os.path.join(BIN, name)) else name


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> str:
    configure = subprocess.run(
        [_tool("cmake"), "-S", ROOT, "-B", BUILD, "-G", "Ninja",
         f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", "-DCMAKE_BUILD_TYPE=Release",
         # -O0: what is tested is which codecs the build has, not its speed (half the compile CPU)
         "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
         f"-DPython_EXECUTABLE={sys.executable}", f"-DPython3_EXECUTABLE={sys.executable}",
         "-DSTOKER_BUILD_TESTS=OFF", "-DSTOKER_WERROR=ON",  # as `make build`: ccache hits
         "-DSTOKER_WITH_PNG=OFF", "-DSTOKER_WITH_WEBP=OFF",
         # the compiler scikit-build-core picks for `make build` (cmake alone would take c++)
         *([f"-DCMAKE_CXX_COMPILER={shutil.which('g++')}"] if shutil.which("g++") else [])],
        capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    assert "stoker image codecs: JPEG\n" in configure.stdout, configure.stdout
    assert "without PNG (STOKER_WITH_PNG=OFF)" in configure.stdout, configure.stdout
    assert "without WebP (STOKER_WITH_WEBP=OFF)" in configure.stdout, configure.stdout
    build = subprocess.run([_tool("cmake"), "--build", BUILD, "--target", "_stoker", "-j",
                            str(os.cpu_count() or 2)], capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    # The package as an install lays it out: the Python sources, the module and _build_info.py.
    root = tmp_path_factory.mktemp("nocodecs")
    dest = root / "stoker"
    shutil.copytree(os.path.join(ROOT, "python", "stoker"), dest,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__", "_build_info.py"))
    for built in glob.glob(os.path.join(BUILD, "_stoker*.so")) + [
            os.path.join(BUILD, "_build_info.py")]:
        shutil.copy2(built, dest)
    return str(root)


def _images(path: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    for fmt in ("JPEG", "PNG", "WEBP"):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=fmt)
        pq.write_table(pa.table({"image": pa.array([buffer.getvalue()] * 3, pa.binary())}),
                       os.path.join(path, f"{fmt.lower()}.parquet"))


PROBE = r"""
import sys
# The development install's import hook would find the editable stoker first.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
sys.path.insert(0, sys.argv[1])
import stoker
from stoker import _build_info, ops
from stoker.errors import UnsupportedInputError
assert stoker.__file__.startswith(sys.argv[1]), stoker.__file__
assert not _build_info.HAVE_PNG and not _build_info.HAVE_WEBP
data = sys.argv[2]

def load(name):
    with stoker.Loader(f"{data}/{name}.parquet", batch_size=3, shuffle=False,
                       transforms={"image": [ops.decode_image(shape=[16, 16])]}) as loader:
        return [b["image"] for b in loader]

batches = load("jpeg")
assert batches[0].shape == (3, 16, 16, 3), batches[0].shape
for name, library in (("png", "libspng"), ("webp", "libwebp")):
    try:
        load(name)
    except UnsupportedInputError as e:
        message = str(e)
        assert library in message and "built without" in message, message
        print(name, "->", message)
    else:
        raise AssertionError(f"{name} decoded in a build without it")
print("probe ok")
"""


def test_a_build_without_png_and_webp_imports_and_names_the_missing_codec(package, tmp_path):
    _images(str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", PROBE, package, str(tmp_path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "probe ok" in done.stdout
    assert "PNG images are not supported by this build" in done.stdout, done.stdout
    assert "WebP images are not supported by this build" in done.stdout, done.stdout
