"""A gzip-compressed snapshot inflated on demand, for the unpickler to stream.

The C unpickler reads a file object as it goes (protocol 4 frame by frame), so a plain snapshot is
never whole in memory beside its objects. A gzip one used to be inflated first and then unpickled:
its bytes (1× the inflated size, 2× while they were joined) beside the object tree. Here the
unpickler reads from a :class:`GunzipStream`, which inflates a bounded piece at a time under the
same rules as every other gzip reader (:func:`~trainscope.collectors.readers.check_expansion`: the
decompression cap and the ratio check of a gzip bomb, and the reader's own ``max_bytes``), and says
damage in the words :func:`~trainscope.collectors.readers.gunzip_limited` uses. Damage found after
the pickle's STOP (a truncated or corrupt trailer) is still found: :meth:`GunzipStream.drain`.
"""

from __future__ import annotations

import io
import zlib
from types import ModuleType
from typing import TYPE_CHECKING
from typing import BinaryIO

from trainscope.collectors.errors import ReadRefused
from trainscope.collectors.errors import TraceError
from trainscope.collectors.readers import check_expansion
from trainscope.collectors.readers import decompression_cap

if TYPE_CHECKING:
    from typing_extensions import Buffer  # collections.abc.Buffer from Python 3.12

try:  # zlib-ng inflates the same deflate stream ≈ 2× faster than zlib (0.34 against 0.75 s for the
    # 1 GB built snapshot gzipped at level 1, measured here); the streaming reader inflates it twice
    from zlib_ng import zlib_ng

    _inflate: ModuleType = zlib_ng
except ImportError:  # pragma: no cover - a dependency; zlib stays correct without it
    _inflate = zlib
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error,) if _inflate is zlib else (zlib.error, _inflate.error)

_IN = 1 << 20  # compressed bytes read at a time
_OUT = 1 << 20  # inflated bytes produced per call at most


class GunzipStream(io.RawIOBase):
    """The inflated bytes of the gzip file ``f``; refusals are :class:`ReadRefused` (one line)."""

    def __init__(self, f: BinaryIO, path: str, max_bytes: int) -> None:
        super().__init__()
        self._f, self._path, self._max = f, path, max_bytes
        cap, self._ratio = decompression_cap()
        self._cap = min(cap, max_bytes + 1)
        self._dec = _inflate.decompressobj(16 + zlib.MAX_WBITS)
        self._buf = memoryview(b"")
        self._read_in = 0  # compressed bytes read from f
        self._out = 0  # inflated bytes produced
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: Buffer) -> int:
        while not len(self._buf) and not self._done:
            self._inflate()
        out = memoryview(b)
        n = min(len(out), len(self._buf))
        out[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def _inflate(self) -> None:
        chunk = self._dec.unconsumed_tail
        if not chunk:
            chunk = self._f.read(_IN)
            self._read_in += len(chunk)
            if not chunk:
                raise ReadRefused("gzip data is damaged: gzip stream is truncated")
        try:
            piece = self._dec.decompress(chunk, _OUT)
        except _INFLATE_ERRORS as e:
            raise ReadRefused(f"gzip data is damaged: corrupt gzip data ({e})") from None
        self._out += len(piece)
        try:
            check_expansion(
                self._path, self._out, self._read_in - len(self._dec.unconsumed_tail), self._cap, self._ratio
            )
        except TraceError as e:
            raise ReadRefused(e.problem) from None
        if self._out > self._max:
            raise ReadRefused(f"larger than the {self._max / 2**20:.0f} MiB limit for a memory snapshot")
        if self._dec.eof:  # a second member or trailing bytes are ignored, as gunzip_limited does
            self._done = True
        self._buf = memoryview(piece)

    def drain(self) -> None:
        """Inflate what the unpickler left unread (the stream's end and its checksum), so damage
        past the pickle's STOP is refused as it was when the whole file was inflated first."""
        self._buf = memoryview(b"")
        while not self._done:
            self._inflate()
            self._buf = memoryview(b"")


def open_gunzipped(f: BinaryIO, path: str, max_bytes: int) -> tuple[io.BufferedReader, GunzipStream]:
    """A buffered reader of ``f``'s inflated bytes (the unpickler peeks and reads lines from it at C
    speed) and the stream under it, for :meth:`GunzipStream.drain`."""
    raw = GunzipStream(f, path, max_bytes)
    return io.BufferedReader(raw, 1 << 20), raw
