"""``analyze --deep``: a second opinion from Holistic Trace Analysis (critical path, launch
statistics), an optional dependency."""
