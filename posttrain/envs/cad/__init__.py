"""The cad domain: the model writes an OpenSCAD script; the part it builds must match a specification.

- ``_domain.py``: the task schema (``gold``, ``iou``, ``tolerance_mm``, ``holes``), the prompt, the
  no-op, the ``HasLevels`` and ``HasCapabilities`` hooks;
- ``_script.py``: the script out of the response, and what a script may not do (include, use or
  import anything, read a file);
- ``_render.py``: OpenSCAD 2021 headless in the sandbox (one fresh job per render; gold renders
  cached per process), and PNG views of the candidate beside the gold (``python -m posttrain.envs.cad
  views``; report.html does not show them yet);
- ``_mesh.py``: the checks on the rendered meshes, in a CPU-budgeted worker process: the gate
  (builds, non-empty, closed and consistently oriented, positive, not self-intersecting, the
  gold's number of bodies), then the specification (bounding box within tolerance, genus, IoU
  with the gold >= 0.95 by default, no missing or extra region thicker than 2 x tolerance nor reaching
  more than 3 x tolerance into the part or out from it, each
  stated hole to its diameter on its axis: ``_holes.py``; how deep a thin region reaches: ``_depth.py``);
- ``_verify.py``: the verifier that ties them together, and why each step runs where it does;
- ``_gen.py``: procedural tasks (CAD-Recode's recipe: primitives, holes, fillets, chamfers,
  pockets, bosses, patterns with templated dimensions -> gold script -> description), the
  difficulty level being the number of features; ``_parts.py``: the four bases and their
  features;
- ``_hacks.py``: the exploit fixtures (each must be a ``fail``, never an ``infra_error``);
- ``_episode.py``: agent episodes on the workspace kit (spec.md, the render tool, part.scad rendered
  again on submit); ``_agents.py``: the scripted oracle and cheat agents; ``_views.py``: renders of
  agents' parts beside the gold (``python -m posttrain.envs.cad views``).

>>> from posttrain.envs.cad import ENV
>>> ENV.name, ENV.needs_sandbox, ENV.level_range()
('cad', True, (1, 6))
"""

from posttrain.envs.cad._domain import ENV, INSTRUCTIONS, CadDomain, fenced
from posttrain.envs.cad._render import render_views, write_views
from posttrain.envs.cad._verify import make_cad_verifier, verify_cad

__all__ = ["ENV", "INSTRUCTIONS", "CadDomain", "fenced", "make_cad_verifier", "render_views", "verify_cad",
           "write_views"]
