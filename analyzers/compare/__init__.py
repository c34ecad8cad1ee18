"""Two runs: before and after (diff, gate, statistics), the module trees compared, the run history's
stored summaries."""
