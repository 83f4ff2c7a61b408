"""The `specaudit` subcommands, one module per group; `specaudit.cli` holds the parser and `main`."""
