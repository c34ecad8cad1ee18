"""Trace readers and live samplers. A collector produces the normalized model; it never decides a verdict."""

from trainscope.collectors.errors import TraceError
from trainscope.collectors.inputs import open_file
from trainscope.collectors.inputs import open_traces
from trainscope.collectors.kineto import load_kineto

__all__ = ["TraceError", "load_kineto", "open_file", "open_traces"]
