"""The engine's layers point one way (cpp/src/README.md): a subsystem includes only subsystems
before it in this order, and the public headers include only public headers."""

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["util", "cache", "io", "catalog", "plan", "transform", "decode", "batch", "exec"]
INCLUDE = re.compile(r'#include "([a-z_]+)/')


def test_subsystems_include_only_lower_layers():
    wrong = []
    for path in glob.glob(os.path.join(ROOT, "cpp", "src", "*", "*")):
        layer = os.path.basename(os.path.dirname(path))
        assert layer in ORDER, f"{layer}/ is not in the documented order; add it to both"
        with open(path) as f:
            for included in INCLUDE.findall(f.read()):
                if included != "stoker" and ORDER.index(included) > ORDER.index(layer):
                    wrong.append(f"{os.path.relpath(path, ROOT)} includes {included}/")
    assert not wrong, "\n".join(wrong)


def test_public_headers_include_only_public_headers():
    for path in glob.glob(os.path.join(ROOT, "cpp", "include", "stoker", "*.h")):
        with open(path) as f:
            assert set(INCLUDE.findall(f.read())) <= {"stoker"}, path


def test_readme_states_the_order():
    with open(os.path.join(ROOT, "cpp", "src", "README.md")) as f:
        text = f.read()
    assert " → ".join(ORDER) in text
