"""The wheel as users install it (issue 27, docs/install.md "The wheel").

`make wheel` builds dist/stoker-*.whl (or STOKER_WHEEL names one already built); it is installed
into a fresh virtual environment outside the repository, next to pyarrow and numpy from the package
index, and run with the system's image and hash libraries out of reach: a mount namespace (`unshare
--mount`, as root) bind-mounts an empty file over every libturbojpeg, libjpeg, libspng, libwebp and
libxxhash in /usr/lib/x86_64-linux-gnu, so a wheel that still needed one of them fails to import
(zlib stays: the interpreter's own zlib module needs it, and the manylinux policy counts it as a
system library). In there: `ldd` of the installed extension, `python -m stoker demo`, and an image
(JPEG, PNG, WebP) + tabular loader whose pixels are checked against Pillow's. Then every patch
release of the pyarrow minor the wheel was built against runs the demo, and another minor gets the
clear PyarrowVersionError, not a crash.
"""

from __future__ import annotations

import glob
import io
import os
import re
import shutil
import subprocess
import sys
import time
import venv

import numpy as np
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LIB_DIR = "/usr/lib/x86_64-linux-gnu"
# zlib stays: the interpreter's own zlib module links it, and the manylinux policy lets a wheel use
# the system's libz.so.1 (auditwheel does not copy it).
HIDDEN_PREFIXES = ("libturbojpeg.so", "libjpeg.so", "libspng.so", "libwebp.so", "libwebpdemux.so",
                   "libsharpyuv.so", "libxxhash.so")
# Libraries the extension may load from the system: glibc's, the C++ runtime, the vDSO and zlib,
# which the manylinux policy counts as present everywhere (auditwheel does not copy it).
SYSTEM_OK = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
             "librt.so.1", "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1"}
# The pyarrow releases of the wheel's minor on the package index, and one of another minor.
PYARROW_PATCHES = ("26.0.0", "26.0.1")
PYARROW_OTHER_MINOR = "25.0.1"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux wheel")]


def _pinned(name: str) -> str:
    for line in open(os.path.join(ROOT, "requirements.txt"), encoding="utf-8"):
        if line.startswith(f"{name}=="):
            return line.split("#", 1)[0].strip()
    raise AssertionError(f"{name} is not pinned in requirements.txt")


def _clean_env(venv_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH",
                        "PIP_REQUIRE_VIRTUALENV")}
    env["PATH"] = f"{os.path.join(venv_dir, 'bin')}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def wheel() -> str:
    given = os.environ.get("STOKER_WHEEL")
    if given:
        return given
    done = subprocess.run(["make", "--no-print-directory", "-s", "wheel"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    wheels = glob.glob(os.path.join(ROOT, "dist", "stoker-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def hidden_libraries(tmp_path_factory) -> list:
    """The real files behind every hidden library name (a bind mount follows symlinks)."""
    files = sorted({os.path.realpath(p) for p in glob.glob(os.path.join(LIB_DIR, "lib*.so*"))
                    if os.path.basename(p).startswith(HIDDEN_PREFIXES)})
    assert any("libturbojpeg" in f for f in files), "the test needs the system's libturbojpeg"
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("hiding the system libraries needs root and unshare (util-linux)")
    return files


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("wheel-install")
    assert not str(home).startswith(ROOT)
    venv_dir = str(home / "venv")
    venv.EnvBuilder(with_pip=True).create(venv_dir)
    python = os.path.join(venv_dir, "bin", "python")
    env = _clean_env(venv_dir)
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-compile",
                           "--disable-pip-version-check", wheel,
                           f"pyarrow=={PYARROW_PATCHES[-1]}", _pinned("numpy")],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"pip install of {os.path.basename(wheel)} into a fresh venv: "
          f"{time.perf_counter() - start:.1f} s")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()
    extension = glob.glob(os.path.join(site, "stoker", "_stoker*.so"))
    assert len(extension) == 1, extension
    work = home / "work"
    work.mkdir()
    return {"python": python, "env": env, "site": site, "extension": extension[0],
            "work": str(work), "home": str(home)}


def _hidden_run(argv: list, installed: dict, hidden: list, **kwargs) -> subprocess.CompletedProcess:
    """Runs argv in a mount namespace where every hidden library is an empty file."""
    empty = os.path.join(installed["home"], "empty")
    open(empty, "w").close()
    script = "set -e\n" + "".join(f"mount --bind {empty} '{f}'\n" for f in hidden) + 'exec "$@"\n'
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                           "sh", *argv], env=installed["env"], cwd=installed["work"],
                          capture_output=True, text=True, **kwargs)


def test_the_system_libraries_are_out_of_reach(installed, hidden_libraries):
    code = ("import ctypes, sys\n"
            "for name in ('libturbojpeg.so.0', 'libjpeg.so.62', 'libspng.so.0', 'libwebp.so.7',\n"
            "             'libxxhash.so.0'):\n"
            "    try:\n"
            "        ctypes.CDLL(name)\n"
            "    except OSError:\n"
            "        continue\n"
            "    sys.exit(f'{name} loaded')\n")
    done = _hidden_run([installed["python"], "-c", code], installed, hidden_libraries)
    assert done.returncode == 0, done.stdout + done.stderr
    outside = subprocess.run([installed["python"], "-c", code], env=installed["env"],
                             capture_output=True, text=True)
    assert outside.returncode != 0  # the same check sees them outside the namespace


def test_wheel_metadata_tag_and_contents(wheel):
    import zipfile

    name = os.path.basename(wheel)
    assert re.fullmatch(r"stoker-[0-9.]+-cp3\d+-cp3\d+-manylinux_2_\d+_x86_64\.whl", name), name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(metadata_name).decode()
        info = archive.read("stoker/_build_info.py").decode()
    # `make build` writes bytecode beside the sources: none of it goes into the wheel.
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names), names
    vendored = [os.path.basename(n) for n in names if n.startswith("stoker.libs/")]
    for stem in ("libturbojpeg", "libjpeg", "libspng", "libwebp", "libxxhash"):
        assert any(v.startswith(stem) for v in vendored), (stem, vendored)
    assert not any(v.startswith(("libarrow", "libparquet")) for v in vendored), vendored
    built = re.search(r'PYARROW_VERSION = "([0-9.]+)"', info).group(1)
    major, minor = built.split(".")[:2]
    pin = f"Requires-Dist: pyarrow<{major}.{int(minor) + 1},>={major}.{minor}"
    assert pin in metadata, metadata
    assert "Requires-Dist: numpy" in metadata
    assert re.search(r"Requires-Dist: torch.*extra == \"torch\"", metadata), metadata


def test_ldd_shows_only_glibc_libstdcxx_the_wheels_and_pyarrows_libraries(installed,
                                                                          hidden_libraries):
    readelf = subprocess.run(["readelf", "-d", installed["extension"]], capture_output=True,
                             text=True, check=True).stdout
    rpaths = re.findall(r"\((?:RPATH|RUNPATH)\).*\[(.*)\]", readelf)
    entries = {e for r in rpaths for e in r.split(":")}
    assert "$ORIGIN/../pyarrow" in entries, readelf
    assert all(e.startswith("$ORIGIN") for e in entries), entries  # nothing of the build machine
    done = _hidden_run(["ldd", installed["extension"]], installed, hidden_libraries)
    assert done.returncode == 0, done.stderr
    allowed = (os.path.join(installed["site"], "stoker.libs") + os.sep,
               os.path.join(installed["site"], "pyarrow") + os.sep)
    seen = []
    for line in done.stdout.splitlines():
        line = line.strip()
        assert "not found" not in line, done.stdout
        name = line.split()[0]
        path = name
        if "=>" in line:
            path = os.path.normpath(line.split("=>", 1)[1].split("(")[0].strip())
        seen.append(name)
        if os.path.basename(name) in SYSTEM_OK and not path.startswith(installed["site"]):
            continue
        assert path.startswith(allowed), f"{line}\n---\n{done.stdout}"
    assert any(n.startswith("libarrow.so.") for n in seen), done.stdout
    assert any(n.startswith("libturbojpeg") for n in seen), done.stdout


def test_demo_from_the_installed_wheel_outside_the_repository(installed, hidden_libraries):
    done = _hidden_run([installed["python"], "-m", "stoker", "demo", "--path",
                        os.path.join(installed["work"], "demo_data")], installed, hidden_libraries)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"epoch 1: \d+ rows in", done.stdout), done.stdout


def _image_dataset(path: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image, features

    rng = np.random.default_rng(0)
    images, expected, formats = [], [], ["JPEG", "PNG"]
    if features.check("webp"):
        formats.append("WEBP")
    for i in range(12):
        fmt = formats[i % len(formats)]
        pixels = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        pixels[:12] = pixels[:12] // 4 * 4  # some smooth area for the lossy codecs
        buffer = io.BytesIO()
        options = {"lossless": True} if fmt == "WEBP" else {}
        Image.fromarray(pixels).save(buffer, format=fmt, **options)
        images.append(buffer.getvalue())
        expected.append(np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")))
    table = pa.table({"image": pa.array(images, pa.binary()),
                      "label": pa.array(np.arange(12, dtype=np.int64)),
                      "price": pa.array(np.linspace(0, 1, 12, dtype=np.float32))})
    os.makedirs(path)
    pq.write_table(table, os.path.join(path, "part-0.parquet"), row_group_size=4)
    tolerance = [8 if formats[i % len(formats)] == "JPEG" else 0 for i in range(12)]
    np.savez(os.path.join(path, "..", "expected.npz"), pixels=np.stack(expected),
             tolerance=np.array(tolerance))
    return {"formats": formats}


LOADER_SCRIPT = r"""
import sys
import numpy as np
import stoker
from stoker import ops

path, expected_path = sys.argv[1], sys.argv[2]
expected = np.load(expected_path)
pixels, tolerance = expected["pixels"], expected["tolerance"]
loader = stoker.Loader(path, columns=["image", "label", "price"], batch_size=4, shuffle=False,
                       transforms={"image": [ops.decode_image(shape=[24, 32])]})
labels, prices = [], []
for batch in loader:
    for image, label in zip(batch["image"], batch["label"]):
        diff = np.abs(image.astype(int) - pixels[label].astype(int))
        # PNG and lossless WebP exact; JPEG within the rounding of another libjpeg-turbo build
        assert diff.max() <= tolerance[label] and diff.mean() < 1, (int(label), int(diff.max()))
    labels += batch["label"].tolist()
    prices += batch["price"].tolist()
assert labels == list(range(12)), labels
assert np.allclose(prices, np.linspace(0, 1, 12)), prices
print("images ok", stoker.__version__, stoker.__file__)
"""


def test_image_and_tabular_loader_without_the_system_libraries(installed, hidden_libraries):
    data = os.path.join(installed["work"], "images", "data")
    info = _image_dataset(data)
    assert len(info["formats"]) >= 2
    done = _hidden_run([installed["python"], "-c", LOADER_SCRIPT, data,
                        os.path.join(installed["work"], "images", "expected.npz")],
                       installed, hidden_libraries)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "images ok" in done.stdout and installed["site"] in done.stdout, done.stdout


def _pip(installed: dict, *args: str) -> None:
    done = subprocess.run([installed["python"], "-m", "pip", "install", "-q", "--no-compile",
                           "--disable-pip-version-check", *args], env=installed["env"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]


def test_every_patch_release_of_the_pyarrow_minor_and_a_clear_error_for_another(
        installed, hidden_libraries):
    demo = [installed["python"], "-m", "stoker", "demo", "--path",
            os.path.join(installed["work"], "demo_data")]
    try:
        for version in PYARROW_PATCHES:
            _pip(installed, f"pyarrow=={version}")
            done = _hidden_run(demo, installed, hidden_libraries)
            assert done.returncode == 0, (version, done.stdout + done.stderr)
            assert "epoch 1:" in done.stdout
        _pip(installed, f"pyarrow=={PYARROW_OTHER_MINOR}")
        done = _hidden_run([installed["python"], "-c", "import stoker"], installed,
                           hidden_libraries)
        assert done.returncode == 1, (done.returncode, done.stderr)  # an exception, not a signal
        assert "stoker.errors.PyarrowVersionError" in done.stderr, done.stderr
        assert f"pyarrow {PYARROW_OTHER_MINOR} is installed" in done.stderr, done.stderr
        assert f"built against pyarrow {PYARROW_PATCHES[-1]}" in done.stderr, done.stderr
        assert "pip install 'pyarrow>=26.0,<26.1'" in done.stderr, done.stderr
        # It is an ImportError too: code that guards `import stoker` keeps working.
        guarded = ("try:\n    import stoker\nexcept ImportError as e:\n"
                   "    print('ImportError', type(e).__name__)\n")
        done = subprocess.run([installed["python"], "-c", guarded], env=installed["env"],
                              cwd=installed["work"], capture_output=True, text=True)
        assert "ImportError PyarrowVersionError" in done.stdout, done.stdout + done.stderr
    finally:
        _pip(installed, f"pyarrow=={PYARROW_PATCHES[-1]}")
