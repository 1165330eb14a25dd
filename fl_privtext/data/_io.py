"""Strict file reading shared by the loaders: nothing is skipped silently; every bad row names file, line, expectation."""

from __future__ import annotations

import csv
import gzip
import io
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

# defined without heavy imports for the up-front checks (fl_privtext.pipeline.preflight); re-exported here
from fl_privtext.datafiles import ENV_DATA_ROOT, DataNotFoundError, find_files, resolve_data_root

__all__ = [
    "ENV_DATA_ROOT",
    "DataNotFoundError",
    "cached",
    "find_files",
    "parse_choice",
    "parse_float",
    "parse_int",
    "read_delimited",
    "read_lines",
    "resolve_data_root",
    "row_error",
]

T = TypeVar("T")
Quoting = Literal[0, 1, 2, 3]  # csv.QUOTE_MINIMAL / ALL / NONNUMERIC / NONE


def row_error(path: Path | str, line: int, message: str) -> ValueError:
    return ValueError(f"{path}, line {line}: {message}")


def _open_text(path: Path, encoding: str, newline: str | None) -> io.TextIOBase:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding=encoding, newline=newline)  # type: ignore[return-value]
    return open(path, encoding=encoding, newline=newline)


def read_delimited(
    path: Path,
    *,
    delimiter: str,
    quoting: Quoting = csv.QUOTE_MINIMAL,
    encoding: str = "utf-8",
    header: Sequence[str] | bool = True,
    num_fields: int | None = None,
) -> tuple[list[str] | None, list[list[str]], list[int]]:
    """Read a delimited file with the csv module: (header, rows, starting line number of each row).

    `header`: True reads the first line as the header, a sequence additionally requires exactly those names, False
    means no header. Every row must have `num_fields` fields (default: as many as the header, else as the first row).
    Blank lines are an error except at the end of the file.
    """
    rows: list[list[str]] = []
    lines: list[int] = []
    head: list[str] | None = None
    blank_at: int | None = None
    try:
        with _open_text(path, encoding, newline="") as f:
            reader = csv.reader(f, delimiter=delimiter, quoting=quoting, strict=quoting != csv.QUOTE_NONE)
            prev = 0
            it: Iterator[list[str]] = iter(reader)
            while True:
                try:
                    rec = next(it)
                except StopIteration:
                    break
                except csv.Error as e:
                    raise row_error(path, prev + 1, f"unreadable CSV record ({e}).") from None
                start = prev + 1
                prev = reader.line_num
                if not rec:
                    if blank_at is None:
                        blank_at = start
                    continue
                if blank_at is not None:
                    raise row_error(path, blank_at, "blank line inside the data (expected a record).")
                if head is None and header is not False:
                    head = rec
                    if not isinstance(header, bool) and list(header) != rec:
                        raise row_error(path, start, f"expected the header {list(header)}, found {rec}.")
                    if num_fields is None:
                        num_fields = len(rec)
                    continue
                if num_fields is None:
                    num_fields = len(rec)
                if len(rec) != num_fields:
                    raise row_error(
                        path,
                        start,
                        f"expected {num_fields} {_sep_name(delimiter)}-separated fields, found {len(rec)} "
                        f"(record starts {_preview(delimiter.join(rec))}).",
                    )
                rows.append(rec)
                lines.append(start)
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid {encoding} text ({e}).") from None
    if header is not False and head is None:
        raise row_error(path, 1, "expected a header line, found an empty file.")
    return head, rows, lines


def read_lines(path: Path, *, encoding: str = "utf-8") -> tuple[list[str], list[int]]:
    """Lines of a text file split on LF only (CRLF's CR dropped), with 1-based line numbers.

    A final newline does not make an extra line; blank lines inside the file are returned (callers decide).
    """
    try:
        with _open_text(path, encoding, newline="\n") as f:
            data = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid {encoding} text ({e}).") from None
    parts = data.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    parts = [p.removesuffix("\r") for p in parts]
    return parts, list(range(1, len(parts) + 1))


def _sep_name(delimiter: str) -> str:
    return {"\t": "TAB", ",": "comma", ";": "semicolon", "|": "pipe"}.get(delimiter, repr(delimiter))


def _preview(s: str, n: int = 60) -> str:
    return repr(s if len(s) <= n else s[:n] + "...")


def parse_int(
    value: str, path: Path | str, line: int, column: str, *, lo: int | None = None, hi: int | None = None
) -> int:
    try:
        v = int(value.strip())
    except ValueError:
        raise row_error(path, line, f"column {column!r} expected an integer, found {value!r}.") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise row_error(path, line, f"column {column!r} expected an integer in [{lo}, {hi}], found {v}.")
    return v


def parse_float(value: str, path: Path | str, line: int, column: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise row_error(path, line, f"column {column!r} expected a number, found {value!r}.") from None


def parse_choice(value: str, choices: Sequence[str], path: Path | str, line: int, column: str) -> str:
    if value not in choices:
        raise row_error(path, line, f"column {column!r} expected one of {list(choices)}, found {value!r}.")
    return value


# Parsed files kept in memory, keyed by (file identity, parse parameters): reloading the 60k-post blog is free.
_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_CACHE_SIZE = 8


def cached(paths: Sequence[Path], key: tuple[Any, ...], build: Callable[[], T]) -> T:
    ident = tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths)
    full = (ident, key)
    if full in _CACHE:
        _CACHE.move_to_end(full)
        return _CACHE[full]  # type: ignore[no-any-return]
    value = build()
    _CACHE[full] = value
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return value
