"""docs/install.md "As a package", run literally in a fresh virtual environment.

The section's shell block is executed line by line: `apt-get install` lines are checked to be
satisfied already (the test does not install system packages), `pip` lines run with the fresh
environment's pip inside a copy of the repository's files, and any other line fails the test, so
the docs cannot grow a step this test does not follow. Then the installed package imports and a
loader reads a file, its module finds libarrow only in the pyarrow beside it, and the copy has no
build folder (pip built in a temporary one).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import venv

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _install_steps() -> list:
    text = open(os.path.join(ROOT, "docs", "install.md"), encoding="utf-8").read()
    section = text.split("## As a package", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "docs/install.md 'As a package' has no ```bash block"
    return [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()
            if line.split("#", 1)[0].strip()]


def _copy_sources(dest: str) -> None:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):  # deleted in the work tree, not yet committed
            continue
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))


def test_docs_steps_are_apt_or_pip_only():
    steps = _install_steps()
    assert any("apt-get install" in s for s in steps)
    assert any(s.startswith("pip install") and s.rstrip().endswith(" .") for s in steps)
    for step in steps:
        assert "apt-get install" in step or step.startswith("pip "), step
    apt = next(s for s in steps if "apt-get install" in s)
    # The headers CMake requires (stoker_find_system_library in CMakeLists.txt) are all listed.
    cmake = open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8").read()
    for package in re.findall(r"stoker_find_system_library\(\S+ \S+ \S+ (\S+)\)", cmake):
        assert package in apt.split(), f"docs/install.md's apt-get line lacks {package}"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_install_md_as_a_package_in_a_fresh_venv(tmp_path):
    src = tmp_path / "src"
    _copy_sources(str(src))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(str(env_dir))
    python = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PIP_REQUIRE_VIRTUALENV")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    for step in _install_steps():
        words = shlex.split(step)
        if "apt-get" in words:
            packages = [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
            missing = [p for p in packages
                       if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
            assert not missing, f"docs/install.md needs system packages not installed: {missing}"
            continue
        assert words[0] == "pip", step
        done = subprocess.run([python, "-m", "pip", *words[1:], "-q",
                               "--disable-pip-version-check"],
                              cwd=src, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"`{step}` failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"

    assert not (src / "build").exists(), "pip install . wrote into the source folder's build/"
    probe = (
        "import os, subprocess, sys\n"
        "import numpy as np, pyarrow as pa, pyarrow.parquet as pq\n"
        "import stoker\n"
        "assert stoker.__file__.startswith(sys.prefix), stoker.__file__\n"
        f"path = {str(tmp_path / 'x.parquet')!r}\n"
        "pq.write_table(pa.table({'x': np.arange(100, dtype=np.int64)}), path, row_group_size=30)\n"
        "with stoker.Loader(path, batch_size=32, seed=1, drop_last=False) as loader:\n"
        "    got = np.sort(np.concatenate([b['x'] for b in loader]))\n"
        "assert (got == np.arange(100)).all(), got\n"
        "so = stoker._stoker.__file__\n"
        "dyn = subprocess.run(['readelf', '-d', so], capture_output=True, text=True).stdout\n"
        "print([l.split('[', 1)[1].rstrip(']') for l in dyn.splitlines() if 'RUNPATH' in l or 'RPATH' in l])\n"
    )
    done = subprocess.run([python, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "['$ORIGIN/../pyarrow']", done.stdout
