"""Loader options on the command line, shared by `stoker inspect` and `stoker bench`.

Every ``stoker.Loader`` argument can be given in one general way, so a new Loader option needs
no change here:

  --config FILE        a .json or .toml file holding a mapping {option: value}
  --option KEY=VALUE   one option (repeatable); VALUE is parsed as JSON, and taken as a plain
                       string when it is not JSON (``--option prefetch_bytes=512MiB``)

The dedicated flags (``--columns``, ``--lists``, ``--batch-size``...) are shorthands for the
same options. The command line overrides the config file; one option given by both a flag and
``--option`` (or by two ``--option``) is an error. The Loader validates the values.

Transform ops (``transforms={column: [op, ...]}``) are written either as the engine's dicts,
``{"op": "resize", "size": [32, 32]}`` (what the functions of ``stoker.ops`` return), or as
strings written like those calls: ``"resize([32, 32])"``, ``"normalize(mean=0.5, std=0.25)"``,
``"to_chw"`` (no arguments: the parentheses may be left out). Arguments are Python literals.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from ._option_names import nearest, parameters
from ._options import DECIMAL_MODES, TIME_UNITS  # the engine's values the flags below accept

__all__ = ["add_loader_arguments", "loader_options", "parse_option", "load_config",
           "parse_op", "parse_transforms"]

# Options that are not Loader arguments: the dataset is the URI argument.
_NOT_OPTIONS = {"self", "source"}


def _cli_error(message: str) -> Exception:
    from ._cli_inspect import CliError

    return CliError(message)


# ----------------------------------------------------------------------------- argument types

def parse_option(text: str) -> Tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value): VALUE as JSON, else the plain string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE with KEY a Loader option name, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key, value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not JSON: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object {column: [op, ...]}")
    return value


def _names(text: str) -> List[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, got {text!r}")
    return names


def _per_column_choice(flag: str, choices: tuple):
    """A flag taking one choice for every column (``padded``) or ``col=choice`` pairs, comma
    separated (``hist=padded,tags=ragged``): a str or a {column: choice} dict for the Loader."""

    def parse(text: str):
        text = text.strip()
        if "=" not in text:
            if text not in choices:
                raise argparse.ArgumentTypeError(
                    f"expected one of {', '.join(choices)} or COLUMN=VALUE pairs, got {text!r}")
            return text
        out = {}
        for pair in text.split(","):
            name, _, value = pair.partition("=")
            name, value = name.strip(), value.strip()
            if not name or value not in choices:
                raise argparse.ArgumentTypeError(
                    f"{flag} {pair!r}: expected COLUMN=VALUE with VALUE one of "
                    f"{', '.join(choices)}")
            out[name] = value
        return out

    return parse


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _size(text: str):
    """A row count or byte size: an integer, or a string such as 256MiB for the Loader."""
    text = text.strip()
    return int(text) if text.isdigit() else text


# ----------------------------------------------------------------------------- config files

def load_config(path: str) -> Dict[str, Any]:
    """The mapping of Loader options in a .json or .toml file."""
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext == ".json":
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
        elif ext == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                try:
                    import tomli as tomllib  # type: ignore[no-redef]
                except ImportError:
                    raise _cli_error(f"--config {path}: reading TOML needs Python 3.11 or the "
                                     "tomli package; or write the options as .json") from None
            with open(path, "rb") as f:
                value = tomllib.load(f)
        else:
            raise _cli_error(f"--config {path}: expected a .json or .toml file")
    except OSError as error:
        raise _cli_error(f"--config {path}: {error.strerror or error}") from None
    except ValueError as error:  # json.JSONDecodeError, tomllib.TOMLDecodeError
        raise _cli_error(f"--config {path}: not valid {ext[1:].upper()}: {error}") from None
    if not isinstance(value, dict):
        raise _cli_error(f"--config {path}: expected a mapping of Loader options, got "
                         f"{type(value).__name__}")
    return value


# ----------------------------------------------------------------------------- transform ops

def parse_op(spec: Any, column: str = "?") -> Dict[str, Any]:
    """One op of a transform chain: the engine's dict (passed on as is) or a string written like
    the call of its ``stoker.ops`` function (``"resize([32, 32])"``, ``"to_chw"``)."""
    from . import ops

    if isinstance(spec, dict):
        return spec
    where = f"transforms[{column!r}]"
    if not isinstance(spec, str):
        raise _cli_error(f"{where}: an op is a string such as \"resize([32, 32])\" or a dict "
                         f"such as {{\"op\": \"resize\", \"size\": [32, 32]}}, got {spec!r}")
    try:
        node = ast.parse(spec.strip(), mode="eval").body
    except SyntaxError:
        raise _cli_error(f"{where}: cannot read op {spec!r}: write it like a call, "
                         "e.g. \"resize([32, 32])\"") from None
    if isinstance(node, ast.Name):
        name, call_args, call_kwargs = node.id, [], []
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, call_args, call_kwargs = node.func.id, node.args, node.keywords
    else:
        raise _cli_error(f"{where}: cannot read op {spec!r}: write it like a call, "
                         "e.g. \"resize([32, 32])\"")
    if name not in ops.__all__:
        close = nearest(name, ops.__all__)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _cli_error(f"{where}: unknown op {name!r}{hint}; the ops are "
                         f"{', '.join(ops.__all__)}")
    if any(isinstance(a, ast.Starred) for a in call_args) or \
            any(k.arg is None for k in call_kwargs):
        raise _cli_error(f"{where}: op {spec!r}: no * or ** arguments")

    def literal(node: ast.AST) -> Any:
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise _cli_error(f"{where}: op {spec!r}: argument {ast.unparse(node)!r} is not a "
                             "literal (a number, string, list or dict)") from None

    args = [literal(a) for a in call_args]
    kwargs = {k.arg: literal(k.value) for k in call_kwargs}
    try:
        return getattr(ops, name)(*args, **kwargs)
    except TypeError as error:
        raise _cli_error(f"{where}: op {spec!r}: {error}") from None


def parse_transforms(value: Any) -> Any:
    """``{column: [op, ...]}`` with every op as the engine's dict (see :func:`parse_op`)."""
    if not isinstance(value, dict):
        raise _cli_error(f"transforms: expected a mapping {{column: [op, ...]}}, got {value!r}")
    out = {}
    for column, chain in value.items():
        if isinstance(chain, (str, dict)):
            chain = [chain]
        if not isinstance(chain, list):
            raise _cli_error(f"transforms[{column!r}]: expected a list of ops, got {chain!r}")
        out[column] = [parse_op(op, column) for op in chain]
    return out


# Options whose values the command line rewrites before the Loader sees them.
_CONVERT = {"transforms": parse_transforms}


# ----------------------------------------------------------------------------- the arguments

# Dedicated flags: (flag, Loader option, argparse keywords). Each is a shorthand for
# `--option OPTION=...`; the default (None) means "not given".
_FLAGS = [
    ("--columns", "columns", dict(type=_names, metavar="A,B",
                                  help="columns delivered one array each (comma-separated)")),
    ("--features", "features", dict(type=_names, metavar="A,B",
                                    help="columns stacked into one [B, F] array")),
    ("--batch-size", "batch_size", dict(type=_positive_int)),
    ("--no-shuffle", "shuffle", dict(action="store_const", const=False,
                                     help="shuffle=False")),
    ("--seed", "seed", dict(type=int)),
    ("--shuffle-window", "shuffle_window", dict(type=_size,
                                                help="rows (an integer) or a size such as 256MiB")),
    ("--keep-last", "drop_last", dict(action="store_const", const=False,
                                      help="keep the short last batch (drop_last=False)")),
    ("--num-threads", "num_threads", dict(type=_positive_int)),
    ("--prefetch-bytes", "prefetch_bytes", dict(type=_size, help="e.g. 512MiB")),
    ("--output", "output", dict(choices=["numpy", "torch"])),
    ("--lists", "lists", dict(type=_per_column_choice("--lists", ("padded", "ragged")),
                              metavar="MODE|COL=MODE,...",
                              help="how variable-length list columns arrive: padded or ragged, "
                                   "for all list columns or per column (hist=padded,tags=ragged)")),
    ("--time-unit", "time_unit", dict(type=_per_column_choice("--time-unit", TIME_UNITS),
                                      metavar="UNIT|COL=UNIT,...",
                                      help="timestamps and dates as float64 counts of D, h, m, s, "
                                           "ms, us or ns since the epoch (for all, or per column: "
                                           "ts=s)")),
    ("--decimals", "decimals", dict(type=_per_column_choice("--decimals", DECIMAL_MODES),
                                    metavar="MODE|COL=MODE,...",
                                    help="decimal columns as float64, float32 or scaled_int64 "
                                         "(for all, or per column: price=float64)")),
    ("--fill-null", "fill_null", dict(type=float, help="value that replaces nulls")),
    ("--null-mask", "null_mask", dict(action="store_const", const=True,
                                      help="add <name>_mask arrays")),
    ("--features-dtype", "features_dtype", dict()),
    ("--allow-lossy-cast", "allow_lossy_cast", dict(action="store_const", const=True)),
    ("--cache-dir", "cache_dir", dict(help="node-local cache folder (ready tensors, remote "
                                           "blocks)")),
    ("--transforms", "transforms", dict(
        type=_json_object, metavar="JSON",
        help='transform chains, e.g. \'{"image": ["decode_image()", "resize([32, 32])", '
             '"to_chw()"]}\' (ops as in stoker.ops, or as dicts {"op": ...})')),
]


def add_loader_arguments(parser: argparse.ArgumentParser) -> None:
    """The Loader's options, the same for every command that takes them."""
    group = parser.add_argument_group(
        "Loader options", "every stoker.Loader argument via --option or --config; the flags "
                          "below are shorthands for the common ones")
    group.add_argument("--config", metavar="FILE",
                       help="a .json or .toml file holding a mapping of Loader options")
    group.add_argument("--option", "-o", dest="options", action="append", type=parse_option,
                       default=[], metavar="KEY=VALUE",
                       help="a Loader option (repeatable); VALUE is JSON, or a plain string when "
                            "it is not JSON: -o batch_size=256 -o prefetch_bytes=512MiB "
                            "-o 'categories={\"city\": \"auto\"}'")
    for flag, option, kwargs in _FLAGS:
        if kwargs.get("action") is None and "metavar" not in kwargs and "choices" not in kwargs:
            kwargs = dict(kwargs, metavar=option.upper())
        group.add_argument(flag, dest=f"opt_{option}", default=None, **kwargs)


def _loader_parameters() -> List[str]:
    from .loader import Loader

    return [name for name in parameters(Loader.__init__) if name not in _NOT_OPTIONS]


def loader_options(args: argparse.Namespace,
                   defaults: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The Loader keyword arguments of a command: ``defaults`` < ``--config`` < the command line
    (flags and ``--option``), transform ops converted to dicts, names checked against the Loader's
    signature (the values are the Loader's to check)."""
    options: Dict[str, Any] = dict(defaults or {})
    origin = {key: "default" for key in options}
    if getattr(args, "config", None):
        for key, value in load_config(args.config).items():
            options[key] = value
            origin[key] = f"--config {args.config}"
    given: Dict[str, str] = {}
    for flag, option, _ in _FLAGS:
        value = getattr(args, f"opt_{option}", None)
        if value is not None:
            options[option] = value
            origin[option] = given[option] = flag
    for key, value in getattr(args, "options", []):
        if key in given:
            raise _cli_error(f"option {key!r} given twice: by {given[key]} and by --option")
        options[key] = value
        origin[key] = given[key] = "--option"
    known = _loader_parameters()
    for key in options:
        if key == "source":
            raise _cli_error(f"{origin[key]}: the dataset is the URI argument, not an option")
        if key not in known:
            close = nearest(key, known)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _cli_error(f"{origin[key]}: stoker.Loader has no option {key!r}{hint}")
    for key, convert in _CONVERT.items():
        if options.get(key) is not None:
            options[key] = convert(options[key])
    return options
