"""The `fcp` command of the pip package and `python -m fcp`: runs the C++ CLI
shipped inside the package (fcp/_bin/fcp), with the same arguments, exit code
and output. ``FCP_CLI=/path/to/fcp`` runs another build instead (tests).
It sets ``FCP_PYTHON`` (unless already set) to this interpreter for the CLI's
Python fallback (`fcp lengths` on Parquet/Arrow or with --tokenizer).
Two commands are Python and run here: ``profile --target torch``
(fcp.profile_torch) and ``replay`` (fcp.replay)."""

import os
import pathlib
import sys


def cli_path() -> str:
    """Path of the C++ `fcp` binary this package runs."""
    override = os.environ.get("FCP_CLI")
    if override:
        return override
    return str(pathlib.Path(__file__).resolve().parent / "_bin" / "fcp")


def _python_command(argv):
    """The Python entry point for argv, or None for the C++ CLI's commands."""
    if argv[:1] == ["replay"]:
        from fcp import replay

        return lambda: replay.main(argv[1:])
    if argv[:1] == ["profile"]:
        rest = argv[1:]
        torch_target = any(a in ("--target=torch", "-t=torch") for a in rest) or any(
            a in ("--target", "-t") and b == "torch" for a, b in zip(rest, rest[1:])
        )
        if torch_target:
            from fcp import profile_torch

            return lambda: profile_torch.main(rest)
    return None


def main() -> None:
    command = _python_command(sys.argv[1:])
    if command is not None:
        sys.exit(command())
    path = cli_path()
    if not os.access(path, os.X_OK):
        sys.stderr.write(
            f"error: fcp: the C++ CLI is not installed at {path} (reinstall the "
            "package with `pip install .` in the fcp source tree, or set FCP_CLI)\n"
        )
        sys.exit(1)
    # The CLI's Python-backed paths (`fcp lengths` on Parquet, Arrow or with
    # --tokenizer) run this interpreter, where the package and its optional
    # dependencies are installed, not whichever python3 is first on PATH.
    os.environ.setdefault("FCP_PYTHON", sys.executable)
    sys.stdout.flush()
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
