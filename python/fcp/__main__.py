"""The `fcp` command of the pip package and `python -m fcp`: runs the C++ CLI
shipped inside the package (fcp/_bin/fcp), with the same arguments, exit code
and output. ``FCP_CLI=/path/to/fcp`` runs another build instead (tests).
It sets ``FCP_PYTHON`` (unless already set) to this interpreter for the CLI's
Python fallback (`fcp lengths` on Parquet/Arrow or with --tokenizer)."""

import os
import pathlib
import sys


def cli_path() -> str:
    """Path of the C++ `fcp` binary this package runs."""
    override = os.environ.get("FCP_CLI")
    if override:
        return override
    return str(pathlib.Path(__file__).resolve().parent / "_bin" / "fcp")


def main() -> None:
    path = cli_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write(f"error: fcp: the C++ CLI is not installed at {path} (reinstall the "
                         "package with `pip install .` in the fcp source tree, or set FCP_CLI)\n")
        sys.exit(1)
    # The CLI's Python-backed paths (`fcp lengths` on Parquet, Arrow or with
    # --tokenizer) run this interpreter, where the package and its optional
    # dependencies are installed, not whichever python3 is first on PATH.
    os.environ.setdefault("FCP_PYTHON", sys.executable)
    sys.stdout.flush()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
