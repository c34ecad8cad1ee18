"""The wheel holds every module of the package: the folders are mapped into one `trainscope` package
by pyproject.toml's explicit package list, so a new subpackage missing from that list would be
absent from a non-editable install (it was: `trainscope.api` and `trainscope.analyzers.findings`),
while an editable install — what the tests run — still finds it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_in_the_wheel_and_tests_are_not():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages, dirs = set(cfg["packages"]), cfg["package-dir"]
    found = set()
    for pkg, folder in dirs.items():
        # every folder holding a module: Python imports one without an __init__.py too (a namespace
        # package, such as the injected sitecustomize's folder), and setuptools warns of each it omits
        for module in (ROOT / folder).rglob("*.py"):
            rel = module.parent.relative_to(ROOT / folder)
            if "__pycache__" not in rel.parts:
                found.add(".".join([pkg, *rel.parts]) if rel.parts else pkg)
    # a subfolder of a mapped folder that is itself mapped (trainscope/commands) is found twice
    assert found == packages, (
        f"missing from [tool.setuptools] packages: {sorted(found - packages)}; "
        f"listed without a folder: {sorted(packages - found)}"
    )
    assert not any(p.endswith(".tests") or p == "tests" for p in packages)


@pytest.mark.slow
def test_the_built_wheel_alone_analyzes_a_trace(tmp_path):
    """Build the wheel, unpack it outside the checkout and run `trainscope analyze` from it (the
    checkout's editable mapping is not consulted: the unpacked wheel comes first on the path)."""
    import os
    import subprocess
    import sys
    import zipfile

    pytest.importorskip("setuptools", reason="building the wheel needs setuptools in this environment")
    out = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    assert "absent from the `packages` configuration" not in build.stderr, build.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    assert "trainscope/collectors/step_site/sitecustomize.py" in zipfile.ZipFile(wheel).namelist()
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert not (site / "trainscope" / "tests").exists()
    env = dict(os.environ, PYTHONPATH=str(site))
    trace = ROOT / "tests" / "data" / "kineto" / "resnet50_v100_num_workers_0.pt.trace.json.gz"
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            "import trainscope, sys; print(trainscope.__file__); "
            "from trainscope.cli import main; sys.exit(main(sys.argv[1:]))",
            "analyze",
            str(trace),
            "--format",
            "json",
            "-q",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    first, _, doc = run.stdout.partition("\n")
    assert first.startswith(str(site))
    assert '"axis": "data"' in doc
