"""``python -m posttrain.envs.doc convert|score ...``: a user's FinQA / TAT-QA files (``_anchor_cli.py``)."""

import sys

from posttrain.envs.doc._anchor_cli import main

sys.exit(main())
