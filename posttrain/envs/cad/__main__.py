"""``python -m posttrain.envs.cad views TASKS OUT --agent NAME``: renders beside the gold (``_views.py``)."""

import sys

from posttrain.envs.cad._views import main

if sys.argv[1:2] != ["views"]:
    sys.exit("usage: python -m posttrain.envs.cad views TASKS OUT [--agent NAME ...] [--limit N]")
sys.exit(main(sys.argv[2:]))
