"""BFCL v4 multi-turn tasks as stateful tool-agent episodes, judged the way BFCL's own checker judges them.

    tasks = load_tasks("multi_turn_base")                      # 200 Tasks, domain "bfcl"
    env = BfclEnv(pool, ChatTemplate(policy.tokenizer))        # one per episode (posttrain.envs.Env)
    traj = run_episode(sampler, Episode(task, env, group_id), params, max_turns=60, max_tokens=8192)
    verdict = check_calls(pool, task, [[[Call("cd", {"folder": "document"})], ...], ...])   # replay

Data: the ``bfcl-eval`` wheel (pinned in the Makefile), unzipped under ``<venv>/share/bfcl/wheel``
by ``make install`` (target ``bfcl-data``); never pip-installed (it pins heavy dependencies), never
fetched by a test. A task is one entry of ``BFCL_v4_multi_turn_base.json``: per turn the user's
message, the tools of its involved classes (``multi_turn_func_doc``, as OpenAI tools), the
``initial_config`` of its backends and the ground truth (``possible_answer``, call strings parsed
with ``ast``, never evaluated).

Where the backends run, and how state is carried: BFCL's stateful Python backends
(``func_source_code``: file system, trading bot, travel booking, vehicle control, math, messages,
posts, tickets) run only in the sandbox (``pool.run_python``), one job per step: the job builds the
instances from ``initial_config`` (first step) or unpickles them from the previous job's state,
runs the step's calls, and pickles them again. The host carries the pickle as opaque bytes into the
next job; it never unpickles anything a job wrote, and it reads only the job's JSON report (results,
state differences). BFCL's sources (and mpmath, which ``math_api`` imports) are compiled once per
pool by a sandbox job, with the sandbox's own interpreter, and shipped to each job as a bundle.

Calls: each is dispatched by name to the backend method of that name with its JSON arguments
(BFCL builds a Python string and ``eval``s it); a name outside the task's tool list is never run
and returns an error result; a backend exception is the result ``"Error during execution: ..."``
(BFCL's text); a step whose job does not finish (timeout, memory) returns that error for each of
its calls and leaves the state as it was; the second such job of an episode ends it, failed
(``MAX_UNFINISHED_JOBS``: each holds a sandbox slot for up to 20 s). Arguments are not checked
against the tool schemas (BFCL does not check them either: the backend decides). A call gets a fresh copy of each mutable
default it leaves out (``post_tweet``'s ``mentions=[]``, which ``mention`` extends in place): BFCL's
checker shares one list between every bare post of its process, the model's and the truth's, and
passes a mention nobody asked for (tests/envs/test_bfcl_attacks3.py); here the state check sees it.

Verdict (``Judgement``, ``judge_turn``): BFCL's ``multi_turn_checker``. At the end of each user turn
the ground truth's calls of that turn run on the truth's own instances (carried the same way); the
turn passes when its ground truth is empty, or when the model called at least one tool in the turn,
every public attribute of every backend instance equals the truth's (BFCL's ``_compare_instances``,
Python ``!=`` in the sandbox) and every result of the truth's calls of the turn is among the
results of all the model's calls so far (a multiset, any order). The episode passes when every
turn passes (reward 1, else 0); a turn force-quit at ``max_steps_per_turn`` (BFCL's 20) fails it.
Only executed state and results count: nothing the model writes as text is read as a result.
Extra calls cost nothing when they leave the state as it is (BFCL's design, kept for agreement
with its checker), so a request to read something is met by reading everything: of the 97
multi_turn_base tasks whose ground truth calls a tool without required arguments (``ls``,
``get_watchlist``, ...), the ground truth without those calls passes 1, and with every such
getter called in every turn instead (not the logouts or ``releaseBrakePedal``) passes 87
(tests/envs/test_bfcl_attacks2.py). Neither the final answer's text nor the number of calls is
judged.

``check_calls`` replays given call sequences (per turn, per step) in one job and judges them the
same way: the agreement test (tests/envs/test_bfcl_multiturn.py) compares it with BFCL's checker.

The ``bfcl`` domain (``_domain.py``, ``ENV``): task records, a generator over ``multi_turn_base``,
a one-response verifier (a JSON array of each turn's calls, replayed with ``check_calls``) and
``episode_env`` (a ``BfclEnv``), so that recipes and ``posttrain eval`` take BFCL tasks like any
other (``rl.episodes: tool``, ``eval.episodes: tool`` run them as episodes).

Not here: BFCL's ``long_context``, ``miss_func`` and ``miss_param`` categories, the irrelevance check.
"""

from posttrain.envs.bfcl._backend import BackendInfra, CallsFailed, Judgement, check_calls, judge_turn
from posttrain.envs.bfcl._data import (
    CATEGORIES,
    CLASS_MODULES,
    DOMAIN,
    FUNC_DOCS,
    STATELESS_CLASSES,
    BfclDataMissing,
    Call,
    bfcl_root,
    bfcl_version,
    load_tasks,
    parse_call,
    to_openai_tool,
)
from posttrain.envs.bfcl._domain import ENV, BfclDomain
from posttrain.envs.bfcl._env import MAX_STEPS_PER_TURN, BfclEnv, plain_arguments

__all__ = [
    "CATEGORIES",
    "CLASS_MODULES",
    "DOMAIN",
    "FUNC_DOCS",
    "MAX_STEPS_PER_TURN",
    "STATELESS_CLASSES",
    "ENV",
    "BackendInfra",
    "BfclDomain",
    "BfclDataMissing",
    "BfclEnv",
    "Call",
    "CallsFailed",
    "Judgement",
    "bfcl_root",
    "bfcl_version",
    "check_calls",
    "judge_turn",
    "load_tasks",
    "parse_call",
    "plain_arguments",
    "to_openai_tool",
]
