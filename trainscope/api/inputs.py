"""What an input path names, decided in one place: one trace file (or a single export), or a set of
ranks (a directory of per-rank traces, or a glob pattern), and the rank files of such a set. The
analysis (:mod:`trainscope.api.analysis`), the rank map (:mod:`trainscope.api.executor`) and the cache
key (:mod:`trainscope.api.cache`) all ask here."""

from __future__ import annotations

import glob
import os

from trainscope.collectors.formats import RANK_FILE_SUFFIXES, directory_reader_for


def is_rank_set(path: str) -> bool:
    """A directory (not one that is a single export, such as an Nsight arrowdir), or a glob pattern
    that is not itself an existing file."""
    if os.path.isdir(path):
        return directory_reader_for(path) is None
    return not os.path.exists(path) and glob.has_magic(path)


def rank_files(path: str) -> list[str]:
    """The trace files of a rank directory or glob, sorted by name."""
    if os.path.isdir(path):
        names = [os.path.join(path, f) for f in os.listdir(path)]
    else:
        names = glob.glob(path)
    return sorted(f for f in names if f.lower().endswith(RANK_FILE_SUFFIXES) and os.path.isfile(f))
