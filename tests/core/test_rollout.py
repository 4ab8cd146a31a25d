"""Service.verify_pairs (what tasks validate, posttrain verify and the audit call):
order kept, duplicates verified once, infra errors retried then kept as infra, never cached."""

from posttrain.sched import DomainHooks, LocalBackend, SchedPolicy, Service
from posttrain.types import Task, Verdict

TASK = Task(id="t", domain="math", prompt="x=", fields={"answer": "1"})
FAST = SchedPolicy(max_tries=3, backoff_s=0.001)


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
    with Service(LocalBackend({"math": DomainHooks(v)}), FAST) as svc:
        verdicts = svc.verify_pairs(items)
    assert [x.outcome for x in verdicts] == ["pass", "fail", "pass", "fail", "infra_error", "pass"]
    assert v.calls.count("1") == 1  # verified once for three identical items
    assert v.calls.count("flaky") == 3 and v.calls.count("down") == 3  # 1 try + 2 retries
    assert verdicts[4].error_class == "infra:exhausted"


def test_cache_skips_known_pairs_but_never_caches_infra_errors():
    v = CountingVerifier()
    with Service(LocalBackend({"math": DomainHooks(v)}), SchedPolicy(max_tries=1)) as svc:
        svc.verify_pairs([(TASK, "1"), (TASK, "down")])
        svc.verify_pairs([(TASK, "1"), (TASK, "down")])
        hits = svc.stats()["cache_hits"]
    assert v.calls == ["1", "down", "down"] and hits == 1
