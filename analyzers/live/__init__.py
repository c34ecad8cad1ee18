"""The live engine (``trainscope watch``, counter-only recordings): window statistics over sampled
counters, the live measures' verdict, the step split, per-rank windows, memory creep."""
