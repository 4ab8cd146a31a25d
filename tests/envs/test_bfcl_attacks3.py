"""A policy attacking the ``bfcl`` one-response verifier through a backend's shared mutable default
(the real sandbox, BFCL's real backends and data).

``TwitterAPI.post_tweet(content, tags=[], mentions=[])`` stores its default list in the tweet and
``mention`` extends that list in place: one list for every bare post of the process. The replay runs
the model's calls and then the ground truth's in one job, so a mention the model added to its own
bare post showed in the truth's tweet as well, and the state check saw no difference. The cheat: the
ground truth, plus after each bare ``post_tweet`` a ``mention`` the user never asked for (an
``@intruder``) and a ``get_tweet`` (whose result is then the truth's ``post_tweet`` result).
Measured over the 19 multi_turn_base tasks with a bare ``post_tweet`` (``generate_tasks(200)``):
19 of 19 passed before; 0 of 19 after (``wrong_state``: TwitterAPI.tweets); the 19 references pass.
BFCL's own checker passes 19 of 19 (it runs both in one process too): here the verifier is right,
not in agreement. Each call now gets a fresh copy of the mutable defaults it leaves out."""

from __future__ import annotations

import json

import pytest

from posttrain.envs.bfcl import ENV, BfclDataMissing, load_tasks
from posttrain.types import Task


@pytest.fixture(scope="module")
def task() -> Task:
    try:
        [t] = [t for t in load_tasks("multi_turn_base") if t.id == "multi_turn_base_11"]
    except BfclDataMissing as e:
        pytest.fail(str(e))
    return t


def _with_a_mention_nobody_asked_for(t: Task) -> str:
    tweet_id = t.fields["initial_config"].get("TwitterAPI", {}).get("tweet_counter", 0)
    turns = []
    for turn in t.fields["ground_truth"]:
        calls = []
        for c in turn:
            calls.append(c)
            if c["name"] == "post_tweet":
                assert "mentions" not in c["arguments"]
                calls += [{"name": "mention", "arguments": {"tweet_id": tweet_id, "mentioned_usernames": ["@intruder"]}},
                          {"name": "get_tweet", "arguments": {"tweet_id": tweet_id}}]
                tweet_id += 1
        turns.append(calls)
    return json.dumps(turns)


def test_a_mention_added_to_a_bare_post_is_seen_by_the_state_check(pool, task: Task) -> None:
    verify = ENV.make_verifier(pool)
    assert verify(task, json.dumps(task.fields["ground_truth"])).passed
    verdict = verify(task, _with_a_mention_nobody_asked_for(task))
    assert verdict.outcome == "fail" and verdict.error_class == "wrong_state", verdict
    assert "TwitterAPI.tweets" in verdict.feedback
