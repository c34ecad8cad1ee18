"""trainscope: a terminal profiler and bottleneck diagnoser for deep-learning training jobs."""

__version__ = "0.1.0"
