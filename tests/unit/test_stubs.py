"""The shipped .pyi stubs describe the extension module that was built."""

import ast
import os

import stoker._stoker as extension


def test_stub_names_match_the_extension():
    path = os.path.join(os.path.dirname(extension.__file__), "_stoker.pyi")
    if not os.path.exists(path):  # editable installs keep the stub next to the sources
        import stoker

        path = os.path.join(os.path.dirname(stoker.__file__), "_stoker.pyi")
    tree = ast.parse(open(path).read())
    stubbed = {node.name for node in tree.body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    public = {name for name in dir(extension) if not name.startswith("_")}
    assert stubbed == public, (stubbed ^ public)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {item.name for item in node.body
                       if isinstance(item, ast.FunctionDef) and not item.name.startswith("_")}
            members |= {target.id for item in node.body if isinstance(item, ast.Assign)
                        for target in item.targets if isinstance(target, ast.Name)}
            actual = {name for name in dir(getattr(extension, node.name))
                      if not name.startswith("_")}
            assert members <= actual, (node.name, members - actual)
