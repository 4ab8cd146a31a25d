"""The ``bfcl`` domain: records round-trip, the generator, the one-response verifier (references pass,
no-ops and exploits fail) and its episodes (``episode_env``), over the installed BFCL data and the
real sandbox."""

from __future__ import annotations

import json

import pytest

from posttrain.envs import EpisodeContext, task_to_record
from posttrain.envs.bfcl import ENV, BfclDataMissing, BfclEnv
from posttrain.errors import TaskError
from posttrain.policy import ChatTemplate, Generation, build_char_tokenizer


@pytest.fixture(scope="module")
def tasks():
    try:
        return ENV.generate_tasks(6, seed=3)
    except BfclDataMissing as e:
        pytest.fail(str(e))


def test_generator_is_deterministic_extends_and_round_trips(tasks):
    assert [t.id for t in ENV.generate_tasks(4, seed=3)] == [t.id for t in tasks[:4]]
    assert [t.id for t in ENV.generate_tasks(4, seed=4)] != [t.id for t in tasks[:4]]
    for t in tasks:
        assert t.domain == "bfcl" and json.loads(t.reference) == t.fields["ground_truth"]
        assert ENV.parse_task(json.loads(json.dumps(task_to_record(t))), "rt") == t
    record = task_to_record(tasks[0])
    with pytest.raises(TaskError, match="'involved_classes'"):
        ENV.parse_task({**record, "involved_classes": ["Shell"]}, "bad.jsonl:1")
    with pytest.raises(TaskError, match="'ground_truth'"):
        ENV.parse_task({**record, "ground_truth": []}, "bad.jsonl:2")


def test_references_pass_noops_and_exploits_fail(tasks, pool):
    verify = ENV.make_verifier(pool)
    assert [verify(t, t.reference).outcome for t in tasks] == ["pass"] * len(tasks)
    assert [verify(t, ENV.noop_response(t)).outcome for t in tasks] == ["fail"] * len(tasks)
    got = {name: verify(t, r).outcome for name, t, r in ENV.exploit_fixtures()}
    assert set(got.values()) == {"fail"}, got
    assert verify(tasks[0], '{"calls": []}').error_class == "format"
    lenient = [(t, r) for name, t, r in ENV.exploit_fixtures() if "integer" in name or "NaN" in name or "two names" in name]
    assert len(lenient) == 3  # the huge integer was an infra error (reward NaN, group dropped) with json.loads
    assert [(verify(t, r).outcome, verify(t, r).error_class) for t, r in lenient] == [("fail", "format")] * 3


def test_episode_env_is_a_bfcl_episode(tasks, pool):
    from posttrain.envs import EpisodeContext

    chat = ChatTemplate(build_char_tokenizer())
    verify = ENV.make_verifier(pool)
    env = ENV.episode_env(tasks[0], EpisodeContext(chat, pool, 3, verify))
    assert isinstance(env, BfclEnv) and env.max_steps_per_turn == 3
    assert ENV.episode_env(tasks[0], EpisodeContext(chat, pool, 99, verify)).max_steps_per_turn == 20
    with pytest.raises(ValueError, match="needs a pool"):
        ENV.episode_env(tasks[0], EpisodeContext(chat, None, 3, verify))


def test_demonstration_episode_replays_the_ground_truth_through_the_env(tasks, pool):
    from posttrain.policy import Policy
    from posttrain.rollout.episodes import agent_script, make_episodes, play_scripts

    chat = ChatTemplate(build_char_tokenizer())
    task = tasks[0]

    def plan(task, steps):
        return make_episodes("agent", [task], Policy(None, chat.tokenizer), service=None,
                             verify=ENV.make_verifier(pool), pool=pool, max_turns=steps)

    [traj] = play_scripts(plan, [task], {task.id: agent_script(chat, task)}, None)
    assert traj.verdicts[-1].passed
    turns = [(t.observation_ids, t.action_ids) for t in traj.turns]
    truth = task.fields["ground_truth"]
    assert len(turns) == sum(2 if calls else 1 for calls in truth)  # calls then an answer, per user turn
    later = [chat.tokenizer.decode(list(obs)) for obs, _ in turns[1:]]
    assert any("<tool_response>" in text for text in later)  # backend results, from the sandbox
    assert any(str(task.fields["turns"][1][-1]["content"]) in text for text in later)  # the next user turn


def test_deeply_nested_arguments_fail_as_format_never_as_infra_or_an_exception(tasks, pool):
    """An argument nested just under Python's parser's limit decoded, then overflowed the stack where
    the replay's request was encoded (``json.dumps``): the verifier crashed into ``infra_error``
    (reward NaN, the whole group dropped: a way never to be scored 0). Which depths hit it depends
    on the caller's stack, so every depth up to the parser's limit is tried. In an episode the same
    argument raised RecursionError out of ``step`` (the runner ends the whole batch on it); it is a
    call that cannot be read, which ends the user turn as BFCL's runner does."""
    task = next(t for t in tasks if len(t.fields["turns"]) >= 2)
    verify = ENV.make_verifier(pool)
    rest = ", []" * (len(task.fields["ground_truth"]) - 1)
    for depth in range(900, 1000):
        deep = "[" * depth + "]" * depth
        v = verify(task, '[[{"name": "cd", "arguments": {"folder": ' + deep + "}}]" + rest + "]")
        assert (v.outcome, v.error_class) == ("fail", "format"), (depth, v)
    env = ENV.episode_env(task, EpisodeContext(ChatTemplate(build_char_tokenizer()), pool, 3, verify))
    env.reset(task)
    text = '<tool_call>{"name": "cd", "arguments": {"folder": ' + "[" * 600 + "]" * 600 + "}}</tool_call>"
    ids = (*env.chat.encode(text), env.chat.eos_token_id)
    result = env.step(Generation((), ids, (0.0,) * len(ids), text, "eos"))
    assert env.invalid_actions == 1 and env.turn == 1 and not result.done


class _Answers:
    """A model that answers every step "Done." (no call: each answer ends a BFCL user turn)."""

    chat = None  # plain prompts (agent episodes render through the tokenizer's own template)

    def __init__(self) -> None:
        self.tokenizer = build_char_tokenizer()

    def sampler(self):
        from posttrain.policy import Generation

        tok = self.tokenizer

        class Sampler:
            def generate(self, prompt_ids, params):
                ids = (*tok("Done.", add_special_tokens=False)["input_ids"], tok.eos_token_id)
                return [Generation(tuple(p), ids, (0.0,) * len(ids), "Done.", "eos") for p in prompt_ids]

        return Sampler()


def test_the_runners_cap_follows_from_the_tasks_user_turns(tasks, pool):
    """``max_turns`` is a BFCL user turn's cap on steps with calls; the runner's cap on actions is each
    task's user turns x (cap + 1), so a task of 3+ user turns is no longer cut at max_turns actions
    (eval --episodes agent's default 4, tiny-bfcl's 2) before its verdict."""
    from posttrain.envs import get_domain
    from posttrain.evaluate.sources import runner_episodes
    from posttrain.rollout.episodes import episode_turns

    def action_limit(tasks, steps):
        return episode_turns("agent", tasks, max_turns=steps)

    turns = [len(t.fields["turns"]) for t in tasks]
    assert max(turns) >= 3
    for t in tasks:
        assert ENV.episode_actions(t, 2) == 3 * len(t.fields["turns"])
        assert ENV.episode_actions(t, 99) == 21 * len(t.fields["turns"])  # BFCL's 20 per turn at most
    assert action_limit(tasks, 2) == 3 * max(turns)
    tool = get_domain("tool").generate_tasks(2, seed=0)
    assert action_limit(tool, 2) == 2 and action_limit([*tool, *tasks], 2) == 3 * max(turns)  # a tool task: 2
    long = [t for t in tasks if len(t.fields["turns"]) >= 3][:1]
    records, stats = runner_episodes(_Answers(), long, "agent", verify=ENV.make_verifier(pool), n=1, temperature=0.0,
                                     max_new_tokens=8, seed=0, stage="eval", max_turns=2, pool=pool)
    assert stats["truncation_rate"] == 0.0 and stats["turns"] == len(long[0].fields["turns"])
    [record] = records
    assert record.outcome == "fail" and record.error_class != "truncated"  # judged: no call in any turn


def test_the_position_check_counts_every_action_a_bfcl_episode_may_take():
    from pathlib import Path

    from posttrain.errors import ConfigError
    from posttrain.train.recipe import OBSERVATION_TOKENS, load_recipe

    config = Path(__file__).resolve().parents[2] / "configs" / "tiny-bfcl.yaml"
    load_recipe(config)
    # rl: tasks of 3 user turns, 2 steps with calls each: 9 actions of 16 tokens and 8 observations
    need = 9 * (16 + OBSERVATION_TOKENS) - OBSERVATION_TOKENS
    with pytest.raises(ConfigError, match=rf"the recipe needs \d+: .* is \d+ tokens \+ a rl.episodes: agent episode "
                                          rf"\(rl.max_new_tokens per turn, observations, budget\) {need}"):
        load_recipe(config, ["model.max_positions=10240"])
