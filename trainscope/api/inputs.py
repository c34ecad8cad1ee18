"""What an input names, decided in one place (:func:`describe_input`): one trace file (or a
recording, a snapshot), a directory that is one export (an Nsight arrowdir), a set of ranks (a
directory of per-rank traces, or a glob pattern) with its rank files, or a run of the history. The
commands (:func:`trainscope.common.resolve_inputs`), the analysis (:mod:`trainscope.api.analysis`),
the rank map (:mod:`trainscope.api.executor`), the cache key (:mod:`trainscope.api.cache`) and the
comparison's sides (:mod:`trainscope.api.comparison`) all ask here."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Literal

from trainscope.collectors.formats import RANK_FILE_SUFFIXES
from trainscope.collectors.formats import directory_reader_for

InputKind = Literal["file", "export", "ranks", "run"]

# A reference to a stored run: "12", "run:12", "latest", "latest:TAG", "baseline", "baseline:TAG".
RUN_REF = re.compile(r"^(?:(?:run:)?(?P<id>\d{1,18})|(?P<kind>latest|baseline)(?::(?P<tag>.+))?)$")


@dataclass(frozen=True)
class InputDescription(os.PathLike[str]):
    """One input as the user named it (``given``; a path-like: ``os.fspath`` gives it back) and what
    it is (``kind``): ``"file"`` one file (a trace, an Nsight export, a recording, a snapshot; one
    that does not exist is the reader's to refuse), ``"export"`` a directory that is one export,
    ``"ranks"`` a directory or glob of per-rank traces (``rank_files``: its trace files, sorted by
    name), ``"run"`` a stored run of the history (``12``, ``latest[:TAG]``, ``baseline[:TAG]``)."""

    given: str
    kind: InputKind
    rank_files: tuple[str, ...] = ()

    def __fspath__(self) -> str:
        return self.given

    @property
    def is_rank_set(self) -> bool:
        return self.kind == "ranks"


def describe_input(path: str | os.PathLike[str], runs: bool = False) -> InputDescription:
    """The one description of ``path`` (already one: returned as it is). ``runs``: a run reference
    with no file of that name names a stored run (``diff``'s sides); otherwise it is a path."""

    if isinstance(path, InputDescription):
        return path
    given = os.fspath(path)
    if runs and is_run_ref(given):
        return InputDescription(given, "run")
    if os.path.isdir(given):
        if directory_reader_for(given) is not None:
            return InputDescription(given, "export")
        return InputDescription(given, "ranks", tuple(_rank_files(given)))
    if not os.path.exists(given) and glob.has_magic(given):
        return InputDescription(given, "ranks", tuple(_rank_files(given)))
    return InputDescription(given, "file")


def is_run_ref(text: str) -> bool:
    """Whether ``text`` names a stored run rather than a trace: it matches the reference grammar and
    no file or directory of that name exists (a trace named ``latest`` stays a trace)."""
    return bool(RUN_REF.match(str(text))) and not os.path.exists(text)


def rank_files(path: str | os.PathLike[str]) -> list[str]:
    """The trace files of a rank directory or glob, sorted by name."""
    return list(describe_input(path).rank_files)


def _rank_files(path: str) -> list[str]:
    if os.path.isdir(path):
        names = [os.path.join(path, f) for f in os.listdir(path)]
    else:
        names = glob.glob(path)
    return sorted(f for f in names if f.lower().endswith(RANK_FILE_SUFFIXES) and os.path.isfile(f))
