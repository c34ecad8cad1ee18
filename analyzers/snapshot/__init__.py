"""``trainscope memory``: CUDA memory snapshots (peak, fragmentation, live set at the peak) and
profiler memory timelines (peak by category)."""
