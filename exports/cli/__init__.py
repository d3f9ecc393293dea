"""The `infest` command line: one module per verb (cmd_*), argument helpers, the entry point."""
from infest.exports.cli.main import main

__all__ = ["main"]
