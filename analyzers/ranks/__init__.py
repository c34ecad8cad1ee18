"""A set of ranks: a small summary per rank, the ranks aligned on their collectives' ends, the one rank
story (arrival order, stragglers, late collectives, lanes side by side)."""
