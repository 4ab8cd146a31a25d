"""``python -m posttrain``: the ``posttrain`` command, as ``python -m posttrain.cli`` (a venv's script
may not be on PATH; ``-m`` is how a user reaches the command through a given interpreter)."""

import sys

from posttrain.cli import main

sys.exit(main())
