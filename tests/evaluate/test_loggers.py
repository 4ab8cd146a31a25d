"""TensorBoard / MLflow / W&B loggers: off by default, a clear error when a package is missing (or W&B has no
credentials), real files when present: the same metrics, config and artefacts in each."""

from __future__ import annotations

import importlib.util
import json
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
    lg.log(1, {"pass@1": 0.25, "loss": 2.0, "pass@4": 0.75, "pass^4": 0.125})
    lg.log(2, {"pass@1": 0.5})
    lg.close()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(tmp_path / 'myrun' / 'mlflow.db').resolve()}")
    exp = client.get_experiment_by_name("posttrain")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.run_name == "myrun" and run.info.status == "FINISHED"
    hist = client.get_metric_history(run.info.run_id, "pass_at_1")
    assert [(m.step, m.value) for m in hist] == [(1, 0.25), (2, 0.5)]
    # pass@k and pass^k are two series, never one key holding both
    assert [m.value for m in client.get_metric_history(run.info.run_id, "pass_at_4")] == [0.75]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "pass_hat_4")] == [0.125]


HAS_WANDB = importlib.util.find_spec("wandb") is not None
needs_all = pytest.mark.skipif(not (HAS_TB and HAS_MLFLOW and HAS_WANDB),
                               reason="tensorboard, mlflow and wandb are installed by pyproject's extras")


def _wandb_env(monkeypatch, tmp_path, mode: str = "offline") -> None:
    """W&B with no network and nothing outside tmp_path: its settings, cache and staging dirs too."""
    monkeypatch.setenv("WANDB_MODE", mode)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.setenv("HOME", str(tmp_path / "wandb-home"))


def _wandb_records(run_dir):
    """Every record of the run's offline W&B logs (RUN/wandb/offline-run-*/run-ID.wandb), decoded: the
    file is W&B's LevelDB-style log (a 7-byte header, 32 KiB blocks of records with a 7-byte header each:
    crc32, length, type FULL/FIRST/MIDDLE/LAST), each record a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B"
        pos, pending = 7, b""
        while pos + 7 <= len(data):
            left = 32768 - pos % 32768
            if left < 7:
                pos += left
                continue
            length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
            chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
            if kind in (1, 4):
                rec = pb.Record()
                rec.ParseFromString(pending + chunk)
                records.append(rec)
                pending = b""
            elif kind in (2, 3):
                pending += chunk
            elif kind == 0 and length == 0:
                pos += 32768 - pos % 32768 if pos % 32768 else 0
    return records


def _write_rows(lg) -> list[tuple[str, int, float]]:
    rows = [("sft/loss", s, 2.0 - 0.5 * s) for s in range(3)] + [("rl/reward_mean", s, 0.25 * s) for s in range(2)]
    rows.append(("rl/pass@1", 1, 0.5))
    for key, step, value in rows:
        lg.log(step, {key: value, "rl/kl": float("nan")} if key.startswith("rl/") else {key: value})
    return rows


@needs_all
def test_every_tracker_gets_the_same_metrics_config_and_artefacts(tmp_path, monkeypatch):
    """W&B for real in offline mode (a local run directory, no network), beside TensorBoard and MLflow:
    each stage's steps restart at 0 and every tracker keeps every row, with the run's config and, once
    the run is done, its config.yaml, summary.json and report.html."""
    import mlflow
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from posttrain.evaluate.loggers import publish_artifacts

    _wandb_env(monkeypatch, tmp_path)
    run = tmp_path / "myrun"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 3\nrl:\n  steps: 2\n  lr: 0.001\n")
    lg = make_loggers(run, tensorboard=True, mlflow=True, wandb=True)
    rows = _write_rows(lg)
    lg.close()
    (run / "summary.json").write_text('{"eval": {"rl": {"pass@1": 0.5}}}')
    (run / "report.html").write_text("<html></html>")
    assert publish_artifacts(run, tensorboard=True, mlflow=True, wandb=True) == ["config.yaml", "summary.json",
                                                                               "report.html"]
    want = sorted(rows)

    records = _wandb_records(run)
    history = []
    for rec in records:
        if rec.WhichOneof("record_type") == "history":
            items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in rec.history.item}
            history += [(k, int(items[f"{k.split('/')[0]}/step"]), v) for k, v in items.items()
                        if not k.startswith("_") and not k.endswith("/step")]
    assert sorted(history) == want
    config = {i.key: json.loads(i.value_json) for rec in records for i in (
        rec.run.config.update if rec.WhichOneof("record_type") == "run" else
        rec.config.update if rec.WhichOneof("record_type") == "config" else [])}
    assert config["seed"] == 3 and config["rl"] == {"steps": 2, "lr": 0.001}
    (artifact,) = [rec.artifact for rec in records if rec.WhichOneof("record_type") == "artifact"]
    assert artifact.type == "posttrain-run" and sorted(e.path for e in artifact.manifest.contents) == [
        "config.yaml", "report.html", "summary.json"]
    assert len({rec.run.run_id for rec in records if rec.WhichOneof("record_type") == "run"}) == 1  # one W&B run

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    assert sorted((t, e.step, e.value) for t in acc.Tags()["scalars"] for e in acc.Scalars(t)) == want
    assert {"run/config/text_summary", "run/summary/text_summary"} <= set(acc.Tags()["tensors"])

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(run / 'mlflow.db').resolve()}")
    (mrun,) = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    got = sorted((k, m.step, m.value) for k in mrun.data.metrics for m in client.get_metric_history(mrun.info.run_id, k))
    assert got == sorted((k.replace("@", "_at_"), s, v) for k, s, v in want)
    assert mrun.data.params["rl.steps"] == "2" and mrun.data.params["seed"] == "3"
    assert sorted(a.path for a in client.list_artifacts(mrun.info.run_id)) == ["config.yaml", "report.html",
                                                                             "summary.json"]


@needs_all
def test_a_resumed_run_continues_the_same_tracker_runs(tmp_path, monkeypatch):
    import mlflow

    _wandb_env(monkeypatch, tmp_path)
    run = tmp_path / "r"
    for _ in range(2):
        lg = make_loggers(run, tensorboard=False, mlflow=True, wandb=True)
        lg.log(0, {"rl/loss": 1.0})
        lg.close()
    ids = json.loads((run / "trackers.json").read_text())
    assert set(ids) == {"mlflow", "wandb"}
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(run / 'mlflow.db').resolve()}")
    assert len(client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])) == 1
    assert {rec.run.run_id for rec in _wandb_records(run) if rec.WhichOneof("record_type") == "run"} == {ids["wandb"]}


@pytest.mark.skipif(not HAS_WANDB, reason="wandb is installed by pyproject's extras")
def test_wandb_online_without_credentials_is_one_line(tmp_path, monkeypatch):
    """In a fresh process (W&B keeps its settings per process): online, no API key -> one line, no run."""
    import os
    import subprocess

    _wandb_env(monkeypatch, tmp_path, mode="online")
    code = ("from posttrain.errors import UserError\nfrom posttrain.evaluate.loggers import make_loggers\n"
            "try:\n    make_loggers('r', tensorboard=False, mlflow=False, wandb=True)\n"
            "except UserError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, stdin=subprocess.DEVNULL)
    assert out.stdout.startswith("tracking.wandb: ") and "wandb login" in out.stdout, out.stdout + out.stderr
    assert "WANDB_MODE=offline" in out.stdout and out.stdout.count("\n") == 1


def test_the_recipe_switches_wandb_on(tmp_path):
    from posttrain.config import ConfigError, parse_config
    from posttrain.train.recipe import Recipe

    assert parse_config(Recipe, {"tracking": {"wandb": True}}).tracking.wandb is True
    with pytest.raises(ConfigError, match="tracking"):
        parse_config(Recipe, {"tracking": {"wandb": "yes"}})
