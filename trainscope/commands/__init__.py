"""One module per subcommand. Each has ``register(subparsers)`` and ``run(args) -> int``."""
