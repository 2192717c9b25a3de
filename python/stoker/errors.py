"""Exceptions raised by stoker.

Every error a user can cause has its own class. Each subclasses :class:`StokerError` and the
builtin a Python user would reach for (``FileNotFoundError``, ``ValueError``, ``KeyError``,
``TypeError``, ``OSError``), so ``except ValueError`` keeps working. Messages name the file, row
group, column or option involved.
"""

from __future__ import annotations

__all__ = [
    "StokerError",
    "DatasetNotFoundError",
    "EmptyDatasetError",
    "ColumnNotFoundError",
    "InvalidOptionError",
    "UnknownOptionError",
    "UnsupportedTypeError",
    "UnsupportedInputError",
    "NullValueError",
    "LossyCastError",
    "CorruptFileError",
    "SchemaMismatchError",
    "StateMismatchError",
    "StorageError",
    "LoaderStateError",
    "LoaderClosedError",
    "TransformError",
    "WorkerCrashedError",
    "UnsafeMetadataError",
    "InternalError",
    "PyarrowVersionError",
    "error_class",
]


class StokerError(Exception):
    """Base class of every error stoker raises."""


class DatasetNotFoundError(StokerError, FileNotFoundError):
    """A source path or object does not exist."""


class EmptyDatasetError(StokerError, ValueError):
    """A source holds no Parquet files, or the dataset has no rows."""


class ColumnNotFoundError(StokerError, KeyError):
    """A requested column is not in the dataset. The message lists the available columns."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class InvalidOptionError(StokerError, ValueError):
    """An option is out of range or inconsistent with another."""


class UnknownOptionError(InvalidOptionError, TypeError):
    """A keyword argument that ``Loader`` (or ``IterableDataset``, ``describe``) does not take.
    The message suggests the nearest parameter, and for ``torch.utils.data.DataLoader``'s own
    names (``num_workers``, ``collate_fn``...) stoker's equivalent. A ``TypeError`` too, as
    Python's own error for an unexpected keyword is."""


class UnsupportedTypeError(StokerError, TypeError):
    """A column's type cannot become a tensor, or needs an explicit choice (e.g. ``lists``)."""


class UnsupportedInputError(UnsupportedTypeError):
    """A row holds a valid value that stoker does not decode (a lossless or 12-bit JPEG, an
    animated WebP, a GIF, BMP, TIFF, JPEG 2000, AVIF or HEIF file, an image above ``max_pixels``,
    an npy of a dtype with no tensor such as complex or structured). Not a
    :class:`CorruptFileError`: the file is fine. Raised under ``on_error="raise"``;
    ``on_error="zero"`` substitutes the row as it does a corrupt one."""


class NullValueError(StokerError, ValueError):
    """A column holds nulls and neither ``fill_null`` nor ``null_mask`` was given for it."""


class LossyCastError(StokerError, ValueError):
    """A cast could lose information and ``allow_lossy_cast`` was not set."""


class CorruptFileError(StokerError, OSError):
    """A file is not valid Parquet, is truncated, or a column chunk cannot be decoded."""


class SchemaMismatchError(StokerError, ValueError):
    """Two files of one dataset disagree on a column."""


class StateMismatchError(StokerError, ValueError):
    """A resume state does not belong to this loader's dataset and options."""


class StorageError(StokerError, OSError):
    """The storage layer failed (permissions, network, server errors after retries)."""


class LoaderStateError(StokerError, RuntimeError):
    """A call the loader's state does not allow, e.g. resuming an iterator that a newer
    iteration, ``set_epoch()`` or ``load_state_dict()`` ended."""


class LoaderClosedError(LoaderStateError):
    """The loader was closed (by ``close()``, possibly from another thread, or ``del``), or it
    was inherited through ``fork()`` and must be created again in the child process."""


class TransformError(StokerError, RuntimeError):
    """A user callable (``transform=``, ``augment=``) raised, or returned arrays that do not
    match its first output; the message names the row group (or batch) and the key."""


class WorkerCrashedError(TransformError):
    """A ``python_workers`` process died (killed, out of memory, a crash in native code) while it
    ran a user callable; the message names the row group (or batch) it was running."""


class UnsafeMetadataError(StokerError, ValueError):
    """A dataset's metadata (a Petastorm ``_common_metadata`` pickle) names a class or function
    stoker does not unpickle, or would make the allowed ones build more than a Unischema needs
    (a budget of memory, small keys and dtypes); the message names the file and what it asked
    for. Nothing was run, nothing beyond the budget was built."""


class InternalError(StokerError, RuntimeError):
    """A bug in stoker. Please report it with the message."""


class PyarrowVersionError(StokerError, ImportError):
    """``import stoker`` found a pyarrow of another major.minor than the one stoker was built
    against: the extension links pyarrow's libarrow/libparquet, whose ABI changes with each minor
    release (the soname is major * 100 + minor). The message names both versions and the fix."""


_BY_KIND = {
    "not_found": DatasetNotFoundError,
    "empty_dataset": EmptyDatasetError,
    "column_not_found": ColumnNotFoundError,
    "invalid_option": InvalidOptionError,
    "unsupported_type": UnsupportedTypeError,
    "null_values": NullValueError,
    "lossy_cast": LossyCastError,
    "corrupt_file": CorruptFileError,
    "schema_mismatch": SchemaMismatchError,
    "state_mismatch": StateMismatchError,
    "storage": StorageError,
    "closed": LoaderClosedError,
    "transform": TransformError,
    "worker_crashed": WorkerCrashedError,
    "unsupported_input": UnsupportedInputError,
}


def error_class(kind: str) -> type[StokerError]:
    """Returns the exception class for an engine error kind (used by the extension)."""
    return _BY_KIND.get(kind, InternalError)
