"""Writing what trainscope produces: documents as JSON (non-finite numbers as null, lone surrogates,
C1 controls, bidi controls and line separators escaped) and files written atomically, for every front end (the CLI, the apps, the api)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from typing import Any


def to_json(doc: dict[str, Any]) -> str:
    """The document as JSON: non-finite numbers written as null, lone surrogates, C1 and bidi
    controls and line separators as ``\\u`` escapes (see traces/safe_text.py)."""
    return _dumps(doc, indent=2) + "\n"


def _dumps(obj: object, **kw: Any) -> str:
    # Imported here, not at the top: trainscope.traces loads numpy (`import trainscope.reports.output`
    # took 11 ms, with safe_text 640 ms, -X importtime), and the CLI imports this module to start.
    from trainscope.traces.safe_text import json_escape_text
    from trainscope.traces.safe_text import json_safe

    try:  # the common case, at the encoder's speed; the walk only when a value needs it
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, **kw)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        text = json.dumps(json_safe(obj), ensure_ascii=False, allow_nan=False, **kw)
    return json_escape_text(text)  # the encoder leaves C1, bidi and separators raw


def to_json_line(obj: dict[str, Any]) -> str:
    """One JSON line (watch's JSON lines), with the same rules as :func:`to_json`."""
    return _dumps(obj)


def write_atomic(path: str, text: str | bytes) -> None:
    """Write a report (text, UTF-8 encoded, or bytes) so an interrupt never leaves half of one,
    and nothing else is harmed.

    - a regular file (or a new path): written to a private temporary file beside it, then renamed
      over it; an existing file keeps its mode (and owner, where allowed);
    - a symbolic link: the same, applied to the file it points to (the link stays a link);
    - a device, FIFO or socket (``/dev/stdout``, ``/dev/null``, ``>(cmd)``): written in place, as
      ``tee`` would. Renaming over it would replace a device node with a regular file, and
      refusing would break ``--json /dev/stdout``;
    - a directory: refused (IsADirectoryError) before anything is written.
    """
    target = os.path.realpath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", path)
    data = text if isinstance(text, bytes) else text.encode("utf-8", errors="backslashreplace")
    if st is not None and not stat.S_ISREG(st.st_mode):
        with open(target, "wb") as f:
            f.write(data)
        return
    folder, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=folder or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
