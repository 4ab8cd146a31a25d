"""verify_all: order kept, duplicates verified once, infra errors retried then kept as infra."""

from posttrain.rollout import VerdictCache, verify_all
from posttrain.types import Task, Verdict

TASK = Task(id="t", domain="math", prompt="x=", fields={"answer": "1"})


class CountingVerifier:
    """A test double: passes "1", fails anything else, and is an infra error for "flaky" twice."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, task: Task, response: str) -> Verdict:
        self.calls.append(response)
        if response == "flaky" and self.calls.count("flaky") <= 2:
            return Verdict.infra("sandbox hiccup")
        if response == "down":
            return Verdict.infra("sandbox down")
        return Verdict(outcome="pass" if response == "1" else "fail", reward=float(response == "1"))


def test_order_duplicates_and_retries():
    v = CountingVerifier()
    items = [(TASK, r) for r in ("1", "2", "1", "flaky", "down", "1")]
    verdicts = verify_all(items, {"math": v}, workers=2, infra_retries=2, cache=VerdictCache())
    assert [x.outcome for x in verdicts] == ["pass", "fail", "pass", "fail", "infra_error", "pass"]
    assert v.calls.count("1") == 1  # verified once for three identical items
    assert v.calls.count("flaky") == 3 and v.calls.count("down") == 3  # 1 try + 2 retries


def test_cache_skips_known_pairs_but_never_caches_infra_errors():
    v, cache = CountingVerifier(), VerdictCache()
    verify_all([(TASK, "1"), (TASK, "down")], {"math": v}, workers=1, infra_retries=0, cache=cache)
    verify_all([(TASK, "1"), (TASK, "down")], {"math": v}, workers=1, infra_retries=0, cache=cache)
    assert v.calls == ["1", "down", "down"] and cache.hits == 1
