"""The engine's layers point one way (cpp/src/README.md): a subsystem includes only subsystems
before it in this order, no two files include each other (directly or around a loop), every
folder is in the documented order and has its design note (README.md), and the public headers
include only public headers. And tests/ keeps its layout (tests/README.md): every test module under
unit/<area>/ or system/, names unique, each folder described, the xdist groups naming real
modules."""

import glob
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.path.join(ROOT, "cpp", "src")
ORDER = ["util", "options", "cache", "io", "catalog", "plan", "transform", "resolve", "decode", "batch",
         "exec"]
INCLUDE = re.compile(r'#include "([a-z_]+)/')
INCLUDE_FILE = re.compile(r'^#include "([a-z_]+/[A-Za-z0-9_]+)\.h"', re.MULTILINE)


def _sources():
    return sorted(glob.glob(os.path.join(SRC, "*", "*.h")) +
                  glob.glob(os.path.join(SRC, "*", "*.cc")))


def include_graph():
    """Unit -> the units it includes. A unit is a header with its implementation ("decode/decoder"
    for decoder.h and decoder.cc): what a file includes, its header brings along."""
    graph = {}
    for path in _sources():
        unit = os.path.splitext(os.path.relpath(path, SRC))[0]
        with open(path) as f:
            included = set(INCLUDE_FILE.findall(f.read()))
        graph.setdefault(unit, set()).update(
            other for other in included if other != unit and not other.startswith("stoker/"))
    return graph


def find_cycle(graph):
    """One cycle of `graph` as a list of units (first == last), or None."""
    state = {}  # 1: on the path being walked, 2: done

    def walk(unit, path):
        state[unit] = 1
        path.append(unit)
        for other in sorted(graph.get(unit, ())):
            if state.get(other) == 1:
                return path[path.index(other):] + [other]
            if other not in state:
                cycle = walk(other, path)
                if cycle:
                    return cycle
        path.pop()
        state[unit] = 2
        return None

    for unit in sorted(graph):
        if unit not in state:
            cycle = walk(unit, [])
            if cycle:
                return cycle
    return None


def test_every_folder_is_in_the_order_and_has_its_design_note():
    folders = sorted(os.path.basename(os.path.dirname(path))
                     for path in glob.glob(os.path.join(SRC, "*", "")))
    assert sorted(ORDER) == folders, "add a new folder to ORDER and to cpp/src/README.md"
    missing = [folder for folder in ORDER if not os.path.isfile(os.path.join(SRC, folder, "README.md"))]
    assert not missing, f"no design note (README.md) in: {missing}"


def test_subsystems_include_only_lower_layers():
    wrong = []
    for path in glob.glob(os.path.join(SRC, "*", "*")):
        layer = os.path.basename(os.path.dirname(path))
        assert layer in ORDER, f"{layer}/ is not in the documented order; add it to both"
        if not path.endswith((".h", ".cc")):
            continue
        with open(path) as f:
            for included in INCLUDE.findall(f.read()):
                if included != "stoker" and ORDER.index(included) > ORDER.index(layer):
                    wrong.append(f"{os.path.relpath(path, ROOT)} includes {included}/")
    assert not wrong, "\n".join(wrong)


def test_no_two_files_include_each_other():
    cycle = find_cycle(include_graph())
    assert cycle is None, "include cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_a_cycle():
    # The check itself: a loop through a header-only unit, as transform/op.cc and
    # ops_internal.h once made, is found; a chain is not.
    assert find_cycle({"a/op": {"a/ops_internal"}, "a/ops_internal": {"a/op"}}) == [
        "a/op", "a/ops_internal", "a/op"]
    assert find_cycle({"a/x": {"a/y"}, "a/y": {"a/z"}, "a/z": set()}) is None
    assert find_cycle({"a/x": {"a/y"}, "a/y": {"a/z"}, "a/z": {"a/x"}}) == [
        "a/x", "a/y", "a/z", "a/x"]


def test_public_headers_include_only_public_headers():
    for path in glob.glob(os.path.join(ROOT, "cpp", "include", "stoker", "*.h")):
        with open(path) as f:
            assert set(INCLUDE.findall(f.read())) <= {"stoker"}, path


def test_readme_states_the_order():
    with open(os.path.join(SRC, "README.md")) as f:
        text = f.read()
    assert " → ".join(ORDER) in text


# ------------------------------------------------------------------------------ tests/ itself

TESTS = os.path.join(ROOT, "tests")


def _test_modules():
    """Every test module under tests/, as a "/"-separated path under tests/."""
    found = []
    for folder, dirs, files in os.walk(TESTS):
        dirs[:] = [d for d in dirs if d not in ("data", "__pycache__")]
        found += [os.path.relpath(os.path.join(folder, f), TESTS).replace(os.sep, "/")
                  for f in files if f.startswith("test_") and f.endswith(".py")]
    return sorted(found)


def test_tests_live_in_unit_or_system_and_have_unique_names():
    modules = _test_modules()
    assert len(modules) > 50
    stray = [m for m in modules if m.split("/")[0] not in ("unit", "system")]
    assert not stray, f"put these under tests/unit/<area>/ or tests/system/ (README.md): {stray}"
    names = [m.rsplit("/", 1)[-1] for m in modules]
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, f"test modules are imported by basename; rename one of each: {twice}"


def test_every_test_folder_is_in_the_readme():
    with open(os.path.join(TESTS, "README.md")) as f:
        readme = f.read()
    folders = sorted({m.rsplit("/", 1)[0] + "/" for m in _test_modules() if "/" in m})
    missing = [folder for folder in folders if f"`{folder}`" not in readme]
    assert not missing, f"describe these folders in tests/README.md: {missing}"


def test_the_xdist_groups_name_existing_modules():
    import conftest

    named = conftest._HEAVY_MODULES | conftest._SPARK_MODULES
    assert named
    missing = sorted(m for m in named if not os.path.isfile(os.path.join(TESTS, m)))
    assert not missing, f"tests/conftest.py groups name modules that do not exist: {missing}"


def test_the_loader_module_stays_thin():
    """Issue 24's bound: loader.py keeps construction, iteration and lifecycle (<= 400 lines);
    option building, resume, the Python stages and conversion live in their own modules."""
    with open(os.path.join(os.path.dirname(TESTS), "python", "stoker", "loader.py")) as f:
        lines = f.read().count("\n")
    assert lines <= 400, f"python/stoker/loader.py has {lines} lines; move a concern out of it"
