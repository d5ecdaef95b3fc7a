"""The `fcp` command of the pip package and `python -m fcp`: runs the C++ CLI
shipped inside the package (fcp/_bin/fcp), with the same arguments, exit code
and output. ``FCP_CLI=/path/to/fcp`` runs another build instead (tests)."""

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
        sys.stderr.write(f"error: fcp: the C++ CLI is not installed at {path} "
                         "(install the package with `pip install .`, or set FCP_CLI)\n")
        sys.exit(1)
    sys.stdout.flush()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
