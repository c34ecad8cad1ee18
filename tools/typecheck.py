#!/usr/bin/env python3
"""Type-check trainscope with mypy (strict on every package of it; config in pyproject.toml).

The installed package maps its subpackages onto top-level folders (``trainscope.analyzers`` is
``analyzers/``, see ``[tool.setuptools.package-dir]``), which the editable install resolves with an
import hook that mypy cannot follow. So this script builds the package as it is installed, as a tree
of symbolic links in a temporary folder (``<tmp>/trainscope/`` holding every entry of ``trainscope/``
plus ``analyzers``, ``collectors``, ``traces``, ``reports`` and ``tui`` pointing at the repository's
folders), runs ``python -m mypy -p trainscope`` there with the
repository's configuration, prints mypy's report with the paths mapped back to repository paths and
exits with mypy's exit status (0: no error; 1: errors; 2: mypy could not run).

    python tools/typecheck.py            # the checked packages
    python tools/typecheck.py -p trainscope.reports   # other packages (each -p replaces the default)

Standard library only; mypy must be installed in the running interpreter (the ``test`` extra pins it).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "trainscope"
# The subpackages that live outside trainscope/ (pyproject.toml, [tool.setuptools.package-dir]).
MAPPED = ("analyzers", "collectors", "traces", "reports", "tui")
CHECKED = ("trainscope",)  # every package: collectors, traces, analyzers, reports, tui, the api and the CLI
CACHE = REPO / ".mypy_cache"


def build_tree(root: pathlib.Path) -> pathlib.Path:
    """``root/trainscope``: links to every entry of the repository's trainscope/ and to the mapped folders."""
    pkg = root / PACKAGE
    pkg.mkdir()
    for entry in sorted((REPO / PACKAGE).iterdir()):
        if entry.name == "__pycache__" or entry.name in MAPPED:
            continue
        (pkg / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for name in MAPPED:
        (pkg / name).symlink_to(REPO / name, target_is_directory=True)
    return pkg


def repo_path(path: str) -> str:
    """A path as mypy prints it (relative to the tree, or absolute into it) → the repository path."""
    parts = pathlib.PurePath(path).parts
    if len(parts) >= 2 and parts[0] == PACKAGE and parts[1] in MAPPED:
        return str(pathlib.PurePath(*parts[1:]))
    return path


# "trainscope/analyzers/deep/second_opinion.py:12: error: …" and "trainscope/analyzers/deep/second_opinion.py:12:5: note: …"
_LOCATION = re.compile(r"^(?P<path>[^\s:][^:]*\.pyi?)(?P<rest>:\d+)")


def map_output(text: str, tree: pathlib.Path) -> str:
    out = []
    prefix = str(tree) + os.sep
    for line in text.splitlines(keepends=True):
        if line.startswith(prefix):
            line = line[len(prefix) :]
        m = _LOCATION.match(line)
        if m:
            line = repo_path(m.group("path")) + line[m.end("path") :]
        out.append(line)
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-p",
        "--package",
        action="append",
        dest="packages",
        help=f"a package to check (repeatable; default: {', '.join(CHECKED)})",
    )
    args = parser.parse_args(argv)
    packages = args.packages or list(CHECKED)
    try:
        import mypy  # noqa: F401  (only to say clearly that it is missing)
    except ImportError:
        print("typecheck: mypy is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="trainscope-typecheck-") as tmp:
        root = pathlib.Path(tmp)
        build_tree(root)
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(CACHE)]
        for p in packages:
            cmd += ["-p", p]
        env = dict(os.environ)
        env.pop("MYPYPATH", None)
        # The tree, not the editable install's finder, provides trainscope.
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        sys.stdout.write(map_output(proc.stdout, root))
        sys.stderr.write(map_output(proc.stderr, root))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
