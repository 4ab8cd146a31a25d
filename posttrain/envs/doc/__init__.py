"""The doc domain, whole: professional document analysis, a conclusion with cited evidence.

- ``_env.py``: the task schema, prompt, verifier, no-op, levels and ``generate_tasks``;
- ``_document.py``: the document format (pages, sections, captioned tables) and locations;
- ``_check.py``: the answer's parse, the conclusion and the one-to-one evidence check (worker side);
- ``_gen.py``: generated annual reports in which every figure is known; ``_questions.py``: their questions;
- ``_anchors.py``: FinQA's execution accuracy, TAT-QA's EM/F1, loaders for their JSON files;
- ``_pdf.py``: the PDF rendering and its text layer; ``_exploits.py``: the exploit fixtures;
- ``_episode.py``: agent episodes on the workspace kit (the document in a workspace, ``read_pdf``,
  submit's answer); ``_agents.py``: the scripted oracle and cheat agents; ``_anchor_cli.py``: a user's
  FinQA / TAT-QA files from the command line (``python -m posttrain.envs.doc``).

>>> from posttrain.envs.doc import ENV
>>> ENV.name, ENV.needs_sandbox, ENV.level_range()
('doc', False, (1, 5))
"""

from posttrain.envs.doc._anchors import (
    finqa_execute,
    finqa_execution_accuracy,
    finqa_records,
    load_finqa,
    load_tatqa,
    tatqa_em_f1,
    tatqa_records,
    tatqa_scores,
)
from posttrain.envs.doc._env import ENV, DocEnv, make_doc_verifier, pdf_text
from posttrain.envs.doc._pdf import pdf_pages, render_pdf

__all__ = ["ENV", "DocEnv", "finqa_execute", "finqa_execution_accuracy", "finqa_records", "load_finqa",
           "load_tatqa", "make_doc_verifier", "pdf_pages", "pdf_text", "render_pdf", "tatqa_em_f1", "tatqa_records",
           "tatqa_scores"]
