"""`python -m infest.exports.cli`: the same as the `infest` command."""
import sys

from infest.exports.cli.main import main

sys.exit(main())
