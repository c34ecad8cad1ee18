"""``trainscope plan``: the training-memory ledger of a model description, checked against the memory
capacity of known GPUs."""
