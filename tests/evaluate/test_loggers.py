"""TensorBoard / MLflow loggers: off by default, a clear error when a package is missing, real files when present."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from posttrain.errors import UserError
from posttrain.evaluate.loggers import make_loggers

HAS_TB = importlib.util.find_spec("tensorboard") is not None
HAS_MLFLOW = all(importlib.util.find_spec(m) is not None for m in ("mlflow", "sqlalchemy", "alembic"))


def test_both_off_writes_nothing(tmp_path):
    lg = make_loggers(tmp_path, tensorboard=False, mlflow=False)
    lg.log(0, {"loss": 1.0})
    lg.close()
    assert list(tmp_path.iterdir()) == []


def test_missing_packages_raise_clear_user_errors(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard -> ImportError
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(UserError, match=r"pip install tensorboard"):
        make_loggers(tmp_path, tensorboard=True, mlflow=False)
    with pytest.raises(UserError, match=r"pip install mlflow"):
        make_loggers(tmp_path, tensorboard=False, mlflow=True)


@pytest.mark.skipif(not HAS_TB, reason="optional extra 'tensorboard' not installed (pip install tensorboard)")
def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lg = make_loggers(tmp_path, tensorboard=True, mlflow=False)
    for step in range(3):
        lg.log(step, {"reward_mean": 0.5 * step, "kl": float("nan"), "stage": "rl"})
    lg.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["reward_mean"]
    assert [(e.step, e.value) for e in acc.Scalars("reward_mean")] == [(0, 0.0), (1, 0.5), (2, 1.0)]


@pytest.mark.skipif(not HAS_MLFLOW, reason="optional extra 'mlflow' not installed (pip install mlflow)")
def test_mlflow_local_store_holds_the_metrics(tmp_path):
    import mlflow

    lg = make_loggers(tmp_path / "myrun", tensorboard=False, mlflow=True)
    lg.log(1, {"pass@1": 0.25, "loss": 2.0})
    lg.log(2, {"pass@1": 0.5})
    lg.close()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'myrun' / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name("posttrain")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == "myrun" and run.info.status == "FINISHED"
    hist = client.get_metric_history(run.info.run_id, "pass_1")
    assert [(m.step, m.value) for m in hist] == [(1, 0.25), (2, 0.5)]
