"""Sequence lengths from datasets: the Python side of ``fcp lengths``.

    python -m fcp.lengths INPUT... --out FILE [--field NAME] [--tokenizer tokenizer.json]

    from fcp.lengths import read_lengths, length_report, write_length_file
    lengths, empty = read_lengths(["train_text_document.idx"])
    print(length_report(lengths, empty))
    write_length_file("lengths.txt", lengths)      # for `fcp simulate --lengths`

Formats (by extension, as the C++ ``fcp lengths``): Megatron indexed datasets
(``.idx``, or the ``.idx`` beside a ``.bin``), JSON lines (``.jsonl``), CSV,
Parquet (``.parquet``), Arrow IPC files or streams (``.arrow``, as Hugging Face
``datasets`` saves them) and plain length files (one integer per line).
A field holds a token count (integer), token ids (a list: its length) or text
(a string: tokenized with ``--tokenizer``, a Hugging Face ``tokenizer.json``
loaded by the ``tokenizers`` package; a length is ``len(encode(text).ids)``,
special tokens of the tokenizer's post-processor included). Zero lengths are
counted as empty records and skipped. Output and report are byte-identical to
the C++ command's.

Errors: ``ValueError("<file>[ line N][: field]: <what>")``; the command line
prints it as one ``error:`` line and exits 2.
"""

from __future__ import annotations

import argparse
import csv
import errno
import json
import math
import os
import re
import stat
import struct
import sys
import tempfile
from typing import Iterable, List, Optional, Sequence, Tuple

MAX_LENGTH = 1 << 40
# Caps shared with the C++ readers (src/io/strict_json.h): an input file's
# bytes, one line's bytes (JSON lines, CSV, length files), a JSON record's
# nesting.
MAX_INPUT_BYTES = 1 << 31
MAX_LINE_BYTES = 1 << 26
MAX_JSON_DEPTH = 16
# The integer grammar of every length the readers parse from text, as the C++
# std::from_chars: optional '-', ASCII digits, nothing else ('+5', '1_000',
# non-ASCII digits and inner spaces are not integers).
_INTEGER = re.compile(rb"-?[0-9]+\Z")
_CSV_SPACE = " \t\r\n\v\f"  # C isspace
_IDX_MAGIC = b"MMIDIDX\x00\x00"
_IDX_HEADER_BYTES = 34  # magic 9 + version 8 + dtype 1 + sequences 8 + documents 8


def _escape(text: str) -> str:
    """Control characters as escapes (one-line error messages)."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append("\\x%02x" % code)
        else:
            out.append(ch)
    return "".join(out)


def detect_format(path: str) -> str:
    """'idx', 'jsonl', 'csv', 'parquet', 'arrow' or 'text', by extension."""
    base = os.path.basename(path)
    ext = base.rsplit(".", 1)[1].lower() if "." in base else ""
    if ext in ("idx", "bin"):
        return "idx"
    if ext in ("jsonl", "ndjson", "json"):
        return "jsonl"
    if ext == "csv":
        return "csv"
    if ext in ("parquet", "pq"):
        return "parquet"
    if ext in ("arrow", "feather"):
        return "arrow"
    return "text"


def parse_integer(text: str) -> Optional[int]:
    """The integer of ``text`` by the shared grammar, or None."""
    raw = text.encode("utf-8", "surrogateescape")
    return int(raw) if _INTEGER.match(raw) else None


def _lines(path: str, binary: bool = False):
    """(line number, line) of a file, each at most MAX_LINE_BYTES and all at
    most MAX_INPUT_BYTES; decoded as UTF-8 (undecodable bytes kept as
    surrogates, which no grammar accepts) unless ``binary``."""
    where_file = _escape(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ValueError(f"{where_file}: cannot open file ({e.strerror})") from None
    total = 0
    with f:
        line_no = 0
        while True:
            try:
                line = f.readline(MAX_LINE_BYTES + 1)
            except OSError as e:
                raise ValueError(f"{where_file}: read failed ({e.strerror})") from None
            if not line:
                return
            line_no += 1
            total += len(line)
            if total > MAX_INPUT_BYTES:
                raise ValueError(
                    f"{where_file}: larger than {MAX_INPUT_BYTES} bytes (the input cap)"
                )
            body = line[:-1] if line.endswith(b"\n") else line
            if len(body) > MAX_LINE_BYTES:
                raise ValueError(
                    f"{where_file} line {line_no}: longer than {MAX_LINE_BYTES} "
                    "bytes (the line cap)"
                )
            yield line_no, body if binary else body.decode("utf-8", "surrogateescape")


def _json_depth(value) -> int:
    """Containers nested in ``value`` (a scalar: 0)."""
    if isinstance(value, dict):
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return 0
    return 1 + max((_json_depth(v) for v in children if isinstance(v, (dict, list))), default=0)


def _no_duplicate_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f'duplicate key "{_escape(k)}"')
        out[k] = v
    return out


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def parse_json_record(text: str):
    """One JSON lines record as the C++ reader parses it: strict JSON (no
    NaN/Infinity, no duplicate keys), nested at most MAX_JSON_DEPTH deep.
    Raises ValueError saying why."""
    try:
        record = json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant
        )
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except UnicodeError:
        raise ValueError("invalid UTF-8") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"invalid JSON ({e.msg})") from None
    if _json_depth(record) > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return record


def _check(value: int, where: str) -> int:
    if value < 0:
        raise ValueError(f"{where}: length must be >= 0")
    if value > MAX_LENGTH:
        raise ValueError(f"{where}: length must be <= 2^40")
    return int(value)


def read_idx(path: str, documents: bool = True) -> List[int]:
    """Lengths from a Megatron-Core .idx (format of
    megatron.core.datasets.indexed_dataset: header, int32 sequence lengths,
    int64 pointers, int64 document indices, optional int8 modes)."""
    import numpy as np

    if path.lower().endswith(".bin"):
        path = path[:-3] + "idx"
    where = _escape(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{where}: cannot open file ({e.strerror})") from None
    if len(data) > MAX_INPUT_BYTES:
        raise ValueError(f"{where}: larger than {MAX_INPUT_BYTES} bytes (the input cap)")
    if len(data) < _IDX_HEADER_BYTES or data[:9] != _IDX_MAGIC:
        raise ValueError(f"{where}: not a Megatron indexed dataset index (no MMIDIDX header)")
    (version,) = struct.unpack_from("<Q", data, 9)
    if version != 1:
        raise ValueError(f"{where}: unsupported .idx version {version} (expected 1)")
    code = data[17]
    if not 1 <= code <= 8:
        raise ValueError(f"{where}: unknown token dtype code {code}")
    sequences, docs = struct.unpack_from("<QQ", data, 18)
    body = len(data) - _IDX_HEADER_BYTES
    if sequences > body // 12 or docs > body // 8 or 12 * sequences + 8 * docs > body:
        raise ValueError(
            f"{where}: truncated: header announces {sequences} sequences and "
            f"{docs} document indices, file has {len(data)} bytes"
        )
    expected = 12 * sequences + 8 * docs
    if body not in (expected, expected + sequences):
        raise ValueError(
            f"{where}: size {len(data)} bytes does not match the header "
            f"({sequences} sequences, {docs} document indices)"
        )
    seq_len = np.frombuffer(data, dtype="<i4", count=sequences, offset=_IDX_HEADER_BYTES)
    if sequences and int(seq_len.min()) < 0:
        i = int(np.argmin(seq_len))
        raise ValueError(f"{where}: sequence {i} has length {int(seq_len[i])} < 0")
    if not documents:
        return [int(v) for v in seq_len]
    doc_idx = np.frombuffer(
        data, dtype="<i8", count=docs, offset=_IDX_HEADER_BYTES + 12 * sequences
    )
    out: List[int] = []
    prev = 0
    cumsum = np.concatenate([[0], np.cumsum(seq_len, dtype=np.int64)])
    for k, idx in enumerate(int(v) for v in doc_idx):
        if idx > sequences or idx < prev or (k == 0 and idx != 0):
            raise ValueError(
                f"{where}: document index {k} = {idx} is not increasing within [0, {sequences}]"
            )
        if k > 0:
            out.append(_check(int(cumsum[idx] - cumsum[prev]), f"{where} document {k - 1}"))
        prev = idx
    if prev != sequences:
        raise ValueError(
            f"{where}: {sequences - prev} sequences after the last document end "
            "(use --idx-unit sequence to read sequences)"
        )
    return out


class _Counter:
    """Turns a field value into a length (count, ids or text)."""

    def __init__(self, tokenizer_path: Optional[str]):
        self.tokenizer = None
        if tokenizer_path:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ValueError(
                    "tokenizer: the `tokenizers` package is not installed (pip install tokenizers)"
                ) from None
            try:
                self.tokenizer = Tokenizer.from_file(tokenizer_path)
            except Exception as e:  # tokenizers raises plain Exception
                raise ValueError(
                    f"tokenizer: cannot load {_escape(tokenizer_path)}: "
                    f"{_escape(str(e).splitlines()[0] if str(e) else e)}"
                ) from None

    def lengths(self, values: Sequence, where) -> List[int]:
        """`where(i)` names record i for errors."""
        out: List[Optional[int]] = [None] * len(values)
        texts, text_pos = [], []
        for i, v in enumerate(values):
            if isinstance(v, bool) or v is None:
                raise ValueError(
                    f"{where(i)}: expected a token count (integer) or token ids (array)"
                )
            if isinstance(v, int):
                out[i] = _check(v, where(i))
            elif isinstance(v, (list, tuple)) or hasattr(v, "__len__") and not isinstance(v, str):
                out[i] = _check(len(v), where(i))
            elif isinstance(v, str):
                if self.tokenizer is None:
                    raise ValueError(
                        f"{where(i)}: is text: give --tokenizer tokenizer.json to count its tokens"
                    )
                texts.append(v)
                text_pos.append(i)
            else:
                raise ValueError(
                    f"{where(i)}: expected a token count (integer) or token ids (array)"
                )
        for start in range(0, len(texts), 1024):
            batch = self.tokenizer.encode_batch(texts[start : start + 1024])
            for j, enc in enumerate(batch):
                i = text_pos[start + j]
                out[i] = _check(len(enc.ids), where(i))
        return [int(v) for v in out]


def read_jsonl(path: str, field: str, counter: _Counter) -> List[int]:
    where_file = _escape(path)
    values, lines = [], []
    for line_no, line in _lines(path):
        if not line.strip(_CSV_SPACE):
            continue
        try:
            record = parse_json_record(line)
        except ValueError as e:
            raise ValueError(f"{where_file} line {line_no}: not a JSON object ({e})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where_file} line {line_no}: not a JSON object")
        if field not in record:
            raise ValueError(
                f"{where_file} line {line_no}: {_escape(field)}: missing "
                "(choose the field with --field)"
            )
        values.append(record[field])
        lines.append(line_no)
    return counter.lengths(values, lambda i: f"{where_file} line {lines[i]}: {_escape(field)}")


def read_csv(path: str, field: str, counter: _Counter) -> List[int]:
    where_file = _escape(path)
    values, lines = [], []
    column = None  # one record per line, as the C++ reader splits them
    for line_no, line in _lines(path):
        row = next(csv.reader([line.rstrip("\r")]), [])
        if not row or all(not c.strip(_CSV_SPACE) for c in row):
            continue
        if column is None:
            names = [c.strip(_CSV_SPACE) for c in row]
            if field not in names:
                raise ValueError(
                    f"{where_file} line {line_no}: CSV header has no column "
                    f'"{_escape(field)}" (choose it with --field)'
                )
            column = len(names) - 1 - names[::-1].index(field)
            continue
        if len(row) <= column:
            raise ValueError(f'{where_file} line {line_no}: missing column "{_escape(field)}"')
        cell = row[column].strip(_CSV_SPACE)
        if counter.tokenizer is None:
            number = parse_integer(cell)
            if number is None:
                raise ValueError(
                    f"{where_file} line {line_no}: expected an integer token "
                    f'count, got "{_escape(cell[:40])}"'
                )
            cell = number
        else:
            cell = row[column]
        values.append(cell)
        lines.append(line_no)
    if column is None:
        raise ValueError(f"{where_file}: empty CSV file")
    return counter.lengths(values, lambda i: f"{where_file} line {lines[i]}")


def _read_arrow_table(path: str, fmt: str, field: str):
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(
            f"{_escape(path)}: reading {fmt} needs pyarrow (pip install pyarrow)"
        ) from None
    try:
        if fmt == "parquet":
            schema = pq.read_schema(path)
            if field not in schema.names:
                raise KeyError(field)
            return pq.read_table(path, columns=[field]).column(field)
        try:
            with pa.memory_map(path, "r") as source:
                table = pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:  # Hugging Face datasets write the stream format
            with pa.memory_map(path, "r") as source:
                table = pa.ipc.open_stream(source).read_all()
        if field not in table.column_names:
            raise KeyError(field)
        return table.column(field)
    except KeyError:
        raise ValueError(
            f"{_escape(path)}: {_escape(field)}: no such column (choose it with --field)"
        ) from None
    except (OSError, pa.ArrowException) as e:
        raise ValueError(
            f"{_escape(path)}: cannot read {fmt}: "
            f"{_escape(str(e).splitlines()[0] if str(e) else type(e).__name__)}"
        ) from None


def read_columnar(path: str, fmt: str, field: str, counter: _Counter) -> List[int]:
    column = _read_arrow_table(path, fmt, field)  # without pyarrow: one error line
    import pyarrow as pa
    import pyarrow.compute as pc

    where = lambda i: f"{_escape(path)} row {i}: {_escape(field)}"  # noqa: E731
    typ = column.type
    if pa.types.is_integer(typ):
        if column.null_count:
            raise ValueError(f"{_escape(path)}: {_escape(field)}: has null values")
        values = column.to_pylist()
        return [_check(int(v), where(i)) for i, v in enumerate(values)]
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return [
            _check(int(v), where(i))
            for i, v in enumerate(pc.list_value_length(column).fill_null(0).to_pylist())
        ]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return counter.lengths(column.to_pylist(), where)
    raise ValueError(
        f"{_escape(path)}: {_escape(field)}: column type {typ} is neither a token "
        "count, token ids nor text"
    )


def read_text(path: str) -> List[int]:
    """One integer per line ('#' comments and blank lines skipped)."""
    where_file = _escape(path)
    out = []
    for line_no, line in _lines(path):
        s = line.strip(" \t\r")
        if not s or s.startswith("#"):
            continue
        v = parse_integer(s)
        if v is None:
            raise ValueError(
                f"{where_file}: line {line_no}: expected a positive integer, "
                f'got "{_escape(s[:40])}"'
            )
        out.append(_check(v, f"{where_file}: line {line_no}"))
    return out


def read_lengths(
    paths: Iterable[str],
    field: Optional[str] = None,
    tokenizer: Optional[str] = None,
    idx_unit: str = "document",
) -> Tuple[List[int], int]:
    """(lengths > 0 in input order, number of empty records skipped)."""
    if idx_unit not in ("document", "sequence"):
        raise ValueError("idx-unit: must be 'document' or 'sequence'")
    if field is None:
        field = "text" if tokenizer else "tokens"
    counter = _Counter(tokenizer)
    lengths: List[int] = []
    empty = 0
    for path in paths:
        if os.path.isdir(path):
            raise ValueError(
                f"{_escape(path)}: is a directory (give the files inside, e.g. DIR/*.arrow)"
            )
        fmt = detect_format(path)
        if fmt == "idx":
            part = read_idx(path, documents=idx_unit == "document")
        elif fmt == "jsonl":
            part = read_jsonl(path, field, counter)
        elif fmt == "csv":
            part = read_csv(path, field, counter)
        elif fmt in ("parquet", "arrow"):
            part = read_columnar(path, fmt, field, counter)
        else:
            part = read_text(path)
        for v in part:
            if v == 0:
                empty += 1
            else:
                lengths.append(v)
    return lengths, empty


def length_report(lengths: Sequence[int], empty: int = 0) -> str:
    """Summary and power-of-two histogram (identical to the C++ LengthReport)."""
    s = sorted(int(v) for v in lengths)
    n = len(s)
    total = sum(s)
    out = f"{n} sequences, {total} tokens"
    if empty > 0:
        out += f" ({empty} empty records skipped)"
    out += "\n"
    if n == 0:
        return out

    def pct(p):  # nearest rank
        rank = math.ceil(p / 100.0 * n)
        return s[max(rank, 1) - 1]

    out += (
        f"min {s[0]}  p50 {pct(50)}  p90 {pct(90)}  p99 {pct(99)}  max {s[-1]}  "
        f"mean {total / n:.1f} (tokens)\n"
    )

    def bucket(v):
        return min(max(v.bit_length() - 1, 0), 62)

    lo, hi = bucket(s[0]), bucket(s[-1])
    counts = [0] * (hi - lo + 1)
    for v in s:
        counts[bucket(v) - lo] += 1
    most = max(counts)
    out += f"{'length (tokens)':<24} {'count':>10} {'share':>7}\n"
    for k in range(lo, hi + 1):
        c = counts[k - lo]
        rng = f"[{1 << k}, {1 << (k + 1)})"
        bar = (c * 40 + most - 1) // most if most else 0
        out += f"{rng:<24} {c:>10} {100.0 * c / n:>6.1f}% {'#' * bar}\n"
    return out


def length_file_text(lengths: Sequence[int]) -> str:
    return (
        f"# {len(lengths)} sequence lengths (tokens), one per line; written by fcp lengths\n"
        + "".join(f"{int(v)}\n" for v in lengths)
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        view = view[n:]


def write_output_file(path: str, data: bytes, field: str = "out") -> None:
    """The output-file policy of the C++ tools (``AtomicFile``): an existing
    device, FIFO or socket (``/dev/null``, ``/dev/stdout``, a pipe; also through
    a symlink) is written in place; anything else appears at ``path`` complete
    or not at all: a ``mkstemp`` file beside it (mode 0644), fsynced and renamed
    over ``path`` (a symlink there is replaced, never its target). Any error,
    including a short write under a file-size limit, is
    ``ValueError("<field>: cannot write '<path>': <reason>")`` and leaves no
    temporary file behind."""

    def fail(why: str):
        raise ValueError(f"{field}: cannot write '{_escape(path)}': {why}") from None

    if not path:
        fail("empty path")
    if path.endswith("/"):
        fail("is a directory")
    try:
        st = os.stat(path)  # follows a symlink, as the C++ writer does
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        fail("is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError as e:
            fail(e.strerror)
        try:
            _write_all(fd, data)
        except OSError as e:
            fail(e.strerror)
        finally:
            os.close(fd)
        return
    directory = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fcp-out-", dir=directory)
    except OSError as e:
        fail(e.strerror)
    try:
        try:
            os.fchmod(fd, 0o644)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail(e.strerror)


def write_length_file(path: str, lengths: Sequence[int]) -> None:
    """Writes the length file by :func:`write_output_file`'s policy."""
    write_output_file(path, length_file_text(lengths).encode("utf-8"), "out")


class _UsageError(Exception):
    pass


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors as one ``error:`` line (exit 2), as the C++ commands."""

    def error(self, message):
        raise _UsageError(message)


def main(argv: Optional[List[str]] = None) -> int:
    parser = _OneLineParser(
        prog="fcp lengths",
        description="Sequence lengths from datasets -> length file for `fcp simulate --lengths`.",
    )
    parser.add_argument("inputs", nargs="+", help="dataset files")
    parser.add_argument("-o", "--out", required=True, help="length file to write")
    parser.add_argument(
        "--field",
        default=None,
        help="JSONL/CSV/Parquet/Arrow field (default: tokens; text with --tokenizer)",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help="Hugging Face tokenizer.json to count the tokens of a text field",
    )
    parser.add_argument(
        "--idx-unit",
        default="document",
        choices=["document", "sequence"],
        help=".idx: one length per document or per sequence (default: %(default)s)",
    )
    try:
        args = parser.parse_args(argv)
    except _UsageError as e:
        print(f"error: {_escape(str(e))} (see --help)", file=sys.stderr)
        return 2
    try:
        lengths, empty = read_lengths(args.inputs, args.field, args.tokenizer, args.idx_unit)
        if not lengths:
            raise ValueError("inputs: no non-empty sequences found")
        write_length_file(args.out, lengths)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(length_report(lengths, empty))
        sys.stdout.write(f"wrote {_escape(args.out)}\n")
        sys.stdout.flush()
    except OSError as e:
        print(f"error: stdout: output lost: {e.strerror}", file=sys.stderr)
        # What is still buffered must not fail again at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
