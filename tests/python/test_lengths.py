"""`fcp lengths` / `python -m fcp.lengths` against independent oracles:
Megatron indexed datasets written by megatron-core's own IndexedDatasetBuilder
(and read back by its IndexedDataset), a word-level tokenizer built here with
`tokenizers` (a text's length is its word count), Parquet and Arrow files
written with pyarrow. The C++ command and the Python module must agree byte for
byte on the report and the length file.
"""

import io
import json
import os
import pathlib
import subprocess
import sys
from contextlib import redirect_stdout

import numpy as np
import pytest

import fcp.lengths as fl

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_PARENT = str(pathlib.Path(fl.__file__).resolve().parents[1])


def _cli():
    path = os.environ.get("FCP_CLI") or str(ROOT / "build" / "fcp")
    if not os.path.isfile(path):
        pytest.skip("fcp CLI not found (set FCP_CLI)")
    return path


def _run_cli(args, python_path=PACKAGE_PARENT, python=sys.executable):
    env = dict(os.environ, FCP_PYTHON=python, PYTHONPATH=python_path)
    return subprocess.run(
        [_cli(), "lengths"] + args, capture_output=True, text=True, env=env, timeout=120
    )


def _run_module(args):
    out = io.StringIO()
    with redirect_stdout(out):
        rc = fl.main(args)
    return rc, out.getvalue()


def _file_lengths(path):
    return [
        int(line)
        for line in pathlib.Path(path).read_text().splitlines()
        if line and not line.startswith("#")
    ]


def _without_wrote(text):
    return "\n".join(line for line in text.splitlines() if not line.startswith("wrote "))


@pytest.fixture(scope="module")
def megatron_dataset(tmp_path_factory):
    """Documents of 1-3 sequences (some empty), written by Megatron-Core."""
    import torch
    from megatron.core.datasets import indexed_dataset as indexed

    prefix = str(tmp_path_factory.mktemp("megatron") / "corpus_text_document")
    rng = np.random.default_rng(42)
    builder = indexed.IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    documents = []
    sequences = []
    for _ in range(57):
        doc = [int(rng.integers(0, 5000)) for _ in range(int(rng.integers(1, 4)))]
        if rng.random() < 0.1:
            doc = [0]
        for n in doc:
            builder.add_item(torch.tensor(rng.integers(0, 60000, size=n), dtype=torch.int64))
        builder.end_document()
        documents.append(sum(doc))
        sequences.extend(doc)
    builder.finalize(prefix + ".idx")
    reader = indexed.IndexedDataset(prefix)
    return prefix, documents, sequences, reader


def test_idx_reader_matches_what_megatron_wrote(megatron_dataset):
    prefix, documents, sequences, reader = megatron_dataset
    assert fl.read_idx(prefix + ".idx") == documents
    assert fl.read_idx(prefix + ".bin", documents=False) == sequences
    assert fl.read_idx(prefix + ".idx", documents=False) == [
        int(v) for v in reader.sequence_lengths
    ]


def test_cli_and_module_agree_on_megatron_idx(megatron_dataset, tmp_path):
    prefix, documents, sequences, _ = megatron_dataset
    expected = [d for d in documents if d > 0]
    p = _run_cli([prefix + ".idx", "--out", str(tmp_path / "c.txt")])
    assert p.returncode == 0, p.stderr
    assert _file_lengths(tmp_path / "c.txt") == expected
    rc, out = _run_module([prefix + ".bin", "-o", str(tmp_path / "p.txt")])
    assert rc == 0
    assert (tmp_path / "p.txt").read_bytes() == (tmp_path / "c.txt").read_bytes()
    assert _without_wrote(out) == _without_wrote(p.stdout)
    empty = len(documents) - len(expected)
    assert f"{len(expected)} sequences, {sum(expected)} tokens ({empty} empty" in p.stdout
    p = _run_cli([prefix + ".idx", "--idx-unit", "sequence", "-o", str(tmp_path / "s.txt")])
    assert p.returncode == 0, p.stderr
    assert _file_lengths(tmp_path / "s.txt") == [s for s in sequences if s > 0]


@pytest.fixture(scope="module")
def word_tokenizer(tmp_path_factory):
    import tokenizers
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = ["alpha", "beta", "gamma", "delta", "context", "parallel", "ring"]
    vocab = {"[UNK]": 0}
    vocab.update({w: i + 1 for i, w in enumerate(words)})
    tok = tokenizers.Tokenizer(WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    rng = np.random.default_rng(3)
    texts = [
        " ".join(rng.choice(words + ["unknownword"], size=int(n)))
        for n in rng.integers(1, 300, size=40)
    ]
    return str(path), texts


def test_jsonl_text_is_tokenized_word_by_word(word_tokenizer, tmp_path):
    tokenizer, texts = word_tokenizer
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(texts)))
    expected = [len(t.split()) for t in texts]  # one token per word, [UNK] included
    rc, out = _run_module([str(data), "--tokenizer", tokenizer, "-o", str(tmp_path / "p.txt")])
    assert rc == 0
    assert _file_lengths(tmp_path / "p.txt") == expected
    # The C++ command hands --tokenizer to the Python side: same file, same report.
    p = _run_cli([str(data), "--tokenizer", tokenizer, "--out", str(tmp_path / "c.txt")])
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "c.txt").read_bytes() == (tmp_path / "p.txt").read_bytes()
    assert _without_wrote(p.stdout) == _without_wrote(out)


def test_text_without_tokenizer_is_a_one_line_error(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "hello world"}\n')
    p = _run_cli([str(data), "--field", "text", "-o", str(tmp_path / "x.txt")])
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: ")
    assert "--tokenizer" in p.stderr
    assert not (tmp_path / "x.txt").exists()


def test_parquet_and_arrow_columns(word_tokenizer, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tokenizer, texts = word_tokenizer
    counts = [5, 0, 17, 4096]
    ids = [[1, 2, 3], [], [7] * 9, [1]]
    table = pa.table({"n": counts, "input_ids": ids, "text": texts[:4]})
    pq.write_table(table, tmp_path / "d.parquet")
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink:  # IPC file format
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    with pa.OSFile(str(tmp_path / "s.arrow"), "wb") as sink:  # stream (Hugging Face datasets)
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    for name in ("d.parquet", "f.arrow", "s.arrow"):
        path = str(tmp_path / name)
        assert fl.read_lengths([path], field="n") == ([5, 17, 4096], 1)
        assert fl.read_lengths([path], field="input_ids") == ([3, 9, 1], 1)
        assert fl.read_lengths([path], tokenizer=tokenizer) == (
            [len(t.split()) for t in texts[:4]],
            0,
        )
        with pytest.raises(ValueError, match="no such column"):
            fl.read_lengths([path], field="missing")
    p = _run_cli([str(tmp_path / "d.parquet"), "--field", "n", "-o", str(tmp_path / "c.txt")])
    assert p.returncode == 0, p.stderr
    assert _file_lengths(tmp_path / "c.txt") == [5, 17, 4096]


def test_cli_without_the_python_package_says_so(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "d.parquet").write_bytes(b"")
    p = _run_cli(
        [str(tmp_path / "d.parquet"), "-o", str(tmp_path / "x.txt")], python_path=str(empty)
    )
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "error: lengths:" in p.stderr
    assert "import fcp.lengths" in p.stderr


def test_module_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "b.csv"
    bad.write_text("tokens\n12\nabc\n")
    with pytest.raises(ValueError, match=r"b\.csv line 3: expected an integer"):
        fl.read_lengths([str(bad)])
    idx = tmp_path / "x.idx"
    idx.write_bytes(b"MMIDIDX\x00\x00" + b"\x01" + b"\x00" * 7)
    with pytest.raises(ValueError, match="no MMIDIDX header|truncated"):
        fl.read_lengths([str(idx)])


def test_directory_input_is_a_one_line_error(tmp_path):
    p = _run_cli([str(tmp_path), "-o", str(tmp_path / "x.txt")])
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "is a directory" in p.stderr
    with pytest.raises(ValueError, match="is a directory"):
        fl.read_lengths([str(tmp_path)])
