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
import io
import json
import math
import os
import struct
import sys
import tempfile
from typing import Iterable, List, Optional, Sequence, Tuple

MAX_LENGTH = 1 << 40
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
            data = f.read()
    except OSError as e:
        raise ValueError(f"{where}: cannot open file ({e.strerror})") from None
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
        raise ValueError(f"{where}: truncated: header announces {sequences} sequences and "
                         f"{docs} document indices, file has {len(data)} bytes")
    expected = 12 * sequences + 8 * docs
    if body not in (expected, expected + sequences):
        raise ValueError(f"{where}: size {len(data)} bytes does not match the header "
                         f"({sequences} sequences, {docs} document indices)")
    seq_len = np.frombuffer(data, dtype="<i4", count=sequences, offset=_IDX_HEADER_BYTES)
    if sequences and int(seq_len.min()) < 0:
        i = int(np.argmin(seq_len))
        raise ValueError(f"{where}: sequence {i} has length {int(seq_len[i])} < 0")
    if not documents:
        return [int(v) for v in seq_len]
    doc_idx = np.frombuffer(data, dtype="<i8", count=docs,
                            offset=_IDX_HEADER_BYTES + 12 * sequences)
    out: List[int] = []
    prev = 0
    cumsum = np.concatenate([[0], np.cumsum(seq_len, dtype=np.int64)])
    for k, idx in enumerate(int(v) for v in doc_idx):
        if idx > sequences or idx < prev or (k == 0 and idx != 0):
            raise ValueError(f"{where}: document index {k} = {idx} is not increasing within "
                             f"[0, {sequences}]")
        if k > 0:
            out.append(_check(int(cumsum[idx] - cumsum[prev]), f"{where} document {k - 1}"))
        prev = idx
    if prev != sequences:
        raise ValueError(f"{where}: {sequences - prev} sequences after the last document end "
                         "(use --idx-unit sequence to read sequences)")
    return out


class _Counter:
    """Turns a field value into a length (count, ids or text)."""

    def __init__(self, tokenizer_path: Optional[str]):
        self.tokenizer = None
        if tokenizer_path:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise ValueError("tokenizer: the `tokenizers` package is not installed "
                                 "(pip install tokenizers)") from None
            try:
                self.tokenizer = Tokenizer.from_file(tokenizer_path)
            except Exception as e:  # tokenizers raises plain Exception
                raise ValueError(f"tokenizer: cannot load {_escape(tokenizer_path)}: "
                                 f"{_escape(str(e).splitlines()[0] if str(e) else e)}") from None

    def lengths(self, values: Sequence, where) -> List[int]:
        """`where(i)` names record i for errors."""
        out: List[Optional[int]] = [None] * len(values)
        texts, text_pos = [], []
        for i, v in enumerate(values):
            if isinstance(v, bool) or v is None:
                raise ValueError(f"{where(i)}: expected a token count (integer) or token ids "
                                 "(array)")
            if isinstance(v, int):
                out[i] = _check(v, where(i))
            elif isinstance(v, (list, tuple)) or hasattr(v, "__len__") and not isinstance(v, str):
                out[i] = _check(len(v), where(i))
            elif isinstance(v, str):
                if self.tokenizer is None:
                    raise ValueError(f"{where(i)}: is text: give --tokenizer tokenizer.json to "
                                     "count its tokens")
                texts.append(v)
                text_pos.append(i)
            else:
                raise ValueError(f"{where(i)}: expected a token count (integer) or token ids "
                                 "(array)")
        for start in range(0, len(texts), 1024):
            batch = self.tokenizer.encode_batch(texts[start:start + 1024])
            for j, enc in enumerate(batch):
                i = text_pos[start + j]
                out[i] = _check(len(enc.ids), where(i))
        return [int(v) for v in out]


def read_jsonl(path: str, field: str, counter: _Counter) -> List[int]:
    where_file = _escape(path)
    values, lines = [], []
    try:
        f = open(path, "r", encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{where_file}: cannot open file ({e.strerror})") from None
    with f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{where_file} line {line_no}: not a JSON object") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where_file} line {line_no}: not a JSON object")
            if field not in record:
                raise ValueError(f"{where_file} line {line_no}: {_escape(field)}: missing "
                                 "(choose the field with --field)")
            values.append(record[field])
            lines.append(line_no)
    return counter.lengths(values, lambda i: f"{where_file} line {lines[i]}: {_escape(field)}")


def read_csv(path: str, field: str, counter: _Counter) -> List[int]:
    where_file = _escape(path)
    try:
        f = open(path, "r", encoding="utf-8", newline="")
    except OSError as e:
        raise ValueError(f"{where_file}: cannot open file ({e.strerror})") from None
    values, lines = [], []
    with f:
        reader = csv.reader(f)
        column = None
        for row in reader:
            line_no = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if column is None:
                names = [c.strip() for c in row]
                if field not in names:
                    raise ValueError(f"{where_file} line {line_no}: CSV header has no column "
                                     f"\"{_escape(field)}\" (choose it with --field)")
                column = len(names) - 1 - names[::-1].index(field)
                continue
            if len(row) <= column:
                raise ValueError(f"{where_file} line {line_no}: missing column "
                                 f"\"{_escape(field)}\"")
            cell = row[column].strip()
            if counter.tokenizer is None:
                try:
                    cell = int(cell, 10)
                except ValueError:
                    raise ValueError(f"{where_file} line {line_no}: expected an integer token "
                                     f"count, got \"{_escape(cell[:40])}\"") from None
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
        raise ValueError(f"{_escape(path)}: reading {fmt} needs pyarrow (pip install pyarrow)") \
            from None
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
        raise ValueError(f"{_escape(path)}: {_escape(field)}: no such column (choose it with "
                         "--field)") from None
    except (OSError, pa.ArrowException) as e:
        raise ValueError(f"{_escape(path)}: cannot read {fmt}: "
                         f"{_escape(str(e).splitlines()[0] if str(e) else type(e).__name__)}") \
            from None


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
        return [_check(int(v), where(i))
                for i, v in enumerate(pc.list_value_length(column).fill_null(0).to_pylist())]
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return counter.lengths(column.to_pylist(), where)
    raise ValueError(f"{_escape(path)}: {_escape(field)}: column type {typ} is neither a token "
                     "count, token ids nor text")


def read_text(path: str) -> List[int]:
    """One integer per line ('#' comments and blank lines skipped)."""
    where_file = _escape(path)
    try:
        f = open(path, "r", encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{where_file}: cannot open file ({e.strerror})") from None
    out = []
    with f:
        for line_no, line in enumerate(f, 1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            try:
                v = int(s, 10)
            except ValueError:
                raise ValueError(f"{where_file}: line {line_no}: expected a positive integer, "
                                 f"got \"{_escape(s[:40])}\"") from None
            out.append(_check(v, f"{where_file}: line {line_no}"))
    return out


def read_lengths(paths: Iterable[str], field: Optional[str] = None,
                 tokenizer: Optional[str] = None,
                 idx_unit: str = "document") -> Tuple[List[int], int]:
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
            raise ValueError(f"{_escape(path)}: is a directory (give the files inside, e.g. "
                             "DIR/*.arrow)")
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

    out += (f"min {s[0]}  p50 {pct(50)}  p90 {pct(90)}  p99 {pct(99)}  max {s[-1]}  "
            f"mean {total / n:.1f} (tokens)\n")

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
    return (f"# {len(lengths)} sequence lengths (tokens), one per line; written by fcp lengths\n"
            + "".join(f"{int(v)}\n" for v in lengths))


def write_length_file(path: str, lengths: Sequence[int]) -> None:
    """Writes atomically: a temporary file beside `path`, renamed over it."""
    directory = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".fcp-out-", dir=directory)
    except OSError as e:
        raise ValueError(f"out: cannot write '{_escape(path)}': {e.strerror}") from None
    try:
        with io.open(fd, "w", encoding="utf-8") as f:
            f.write(length_file_text(lengths))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ValueError(f"out: cannot write '{_escape(path)}': {e.strerror}") from None


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fcp lengths",
        description="Sequence lengths from datasets -> length file for `fcp simulate --lengths`.")
    parser.add_argument("inputs", nargs="+", help="dataset files")
    parser.add_argument("-o", "--out", required=True, help="length file to write")
    parser.add_argument("--field", default=None,
                        help="JSONL/CSV/Parquet/Arrow field (default: tokens; text with "
                             "--tokenizer)")
    parser.add_argument("--tokenizer", default=None,
                        help="Hugging Face tokenizer.json to count the tokens of a text field")
    parser.add_argument("--idx-unit", default="document", choices=["document", "sequence"],
                        help=".idx: one length per document or per sequence (default: "
                             "%(default)s)")
    args = parser.parse_args(argv)
    try:
        lengths, empty = read_lengths(args.inputs, args.field, args.tokenizer, args.idx_unit)
        if not lengths:
            raise ValueError("inputs: no non-empty sequences found")
        write_length_file(args.out, lengths)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(length_report(lengths, empty))
    sys.stdout.write(f"wrote {_escape(args.out)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
