"""``.nsys-rep`` / ``.qdrep`` reports: converted to SQLite with the ``nsys`` CLI, cached beside them.

The report format itself is private to Nsight Systems; its SQLite export is documented. When
``nsys`` is on PATH the export is written next to the report as ``<stem>.sqlite`` (what
``nsys export`` writes by default, so a later manual export and trainscope share it) and reused
while it is newer than the report. Without ``nsys`` the error names the exact command to run.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

from trainscope.collectors.errors import TraceError
from trainscope.collectors.readers import Progress


def cache_path(report: str) -> str:
    base, _ = os.path.splitext(report)
    return base + ".sqlite"


def export_command(report: str, output: str) -> list[str]:
    return ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", output, report]


def export_report(report: str, progress: Progress | None = None) -> str:
    """The path of an SQLite export of ``report``, exporting it first if needed."""
    out = cache_path(report)
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(report):
        return out
    command = " ".join(shlex.quote(a) for a in export_command(report, out)).replace(" --force-overwrite true", "")
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(
            report,
            f"Nsight Systems report needs `nsys` to convert it, and nsys is not on PATH; run "
            f"`{command}` and analyze {os.path.basename(out)}",
        )
    if not os.access(os.path.dirname(os.path.abspath(out)), os.W_OK):
        raise TraceError(
            report,
            f"cannot write the SQLite export beside the report; run `{command}` "
            f"with a writable --output and analyze that file",
        )
    tmp = f"{os.path.splitext(out)[0]}.tmp{os.getpid()}.sqlite"
    if progress:
        progress("exporting with nsys", None)
    try:
        p = subprocess.run(export_command(report, tmp), capture_output=True, text=True)
        if p.returncode != 0 or not os.path.exists(tmp):
            last = (p.stderr or p.stdout or "").strip().splitlines()
            why = last[-1] if last else f"exit status {p.returncode}"
            raise TraceError(report, f"`nsys export` failed: {why[:200]}")
        os.replace(tmp, out)  # atomic: an interrupted export never leaves a half-written cache
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return out
