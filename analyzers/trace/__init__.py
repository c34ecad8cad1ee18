"""One trace in, one :class:`~trainscope.analyzers.trace.analysis.Analysis` out: steps, breakdown,
sinks, host idle, GPU gaps, kernels, cost, roofline, MFU, repairs, context, verdict,
recommendations, what-if (``analysis.judge``). Imports no other pipeline."""
