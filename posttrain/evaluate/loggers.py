"""Experiment tracking: TensorBoard, MLflow (local store) and Weights & Biases loggers, off by default.

    logger = make_loggers(run_dir, tensorboard=True, mlflow=False, wandb=False)   # the recipe's switches
    logger.log(step, {"rl/reward_mean": 0.4, "rl/kl": 0.01})
    logger.close()
    publish_artifacts(run_dir, tensorboard=True, mlflow=False, wandb=False)     # once the report is written

Every tracker gets the same three things:

- **metrics**: each row the trainer writes to RUN/metrics.jsonl, keys ``<stage>/<name>``, at that stage's
  step; each stage has its own x axis (its steps restart at 0), which W&B gets as a step metric per
  stage (``define_metric("rl/*", step_metric="rl/step")``: W&B refuses a step lower than the last one);
  non-finite values are skipped (they stay in RUN/metrics.jsonl as written);
- **config**: the resolved recipe, RUN/config.yaml (TensorBoard: a text summary; MLflow: flattened
  params ``rl.steps`` plus ``config.yaml`` as an artefact; W&B: the run's config);
- **artefacts**: once the run's summary and report are written, ``publish_artifacts`` sends
  RUN/config.yaml, summary.json and report.html (MLflow: run artefacts; W&B: one artifact of type
  ``posttrain-run``; TensorBoard, which stores no files: the summary as a text summary).

Where each writes, all under RUN/ and none of them needing a server:

- TensorBoard: ``RUN/tensorboard/`` (``tensorboard --logdir RUN/tensorboard``);
- MLflow: a local SQLite store ``RUN/mlflow.db``, artefacts under ``RUN/mlartifacts/`` (MLflow 3 keeps the
  ``./mlruns`` file store in maintenance mode); experiment ``posttrain``, one MLflow run per posttrain run,
  named after the run directory (``mlflow ui --backend-store-uri sqlite:///RUN/mlflow.db``);
- W&B: ``RUN/wandb/``, project ``$WANDB_PROJECT`` (default ``posttrain``), run named after the run
  directory. ``WANDB_MODE=offline`` writes only the local run directory (no network; ``wandb sync
  RUN/wandb/offline-run-*`` uploads it later); online it needs ``wandb login`` (or ``WANDB_API_KEY``).

A resumed run continues the same tracker runs (their ids are kept in RUN/trackers.json). Asking for
a tracker whose package is absent, or W&B online without credentials, is a ``UserError`` saying what
to do, before any training starts. What it does not do: write RUN/metrics.jsonl (the trainer does).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from posttrain.errors import UserError

__all__ = ["MetricsLogger", "make_loggers", "publish_artifacts", "TensorBoardLogger", "MLflowLogger",
           "WandbLogger", "MultiLogger", "ARTEFACTS"]

ARTEFACTS = ("config.yaml", "summary.json", "report.html")
"""The run's files the trackers receive once the run is done (those that exist)."""
_IDS = "trackers.json"


class MetricsLogger(Protocol):
    """Where a trainer sends its per-step scalars."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def _finite(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for k, v in metrics.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"rl": {"steps": 3}}`` -> ``{"rl.steps": "3"}`` (lists as JSON), for trackers with flat params."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value)
    return out


def _ids(run: Path) -> dict[str, str]:
    try:
        ids = json.loads((run / _IDS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in ids.items() if isinstance(v, str)} if isinstance(ids, dict) else {}


def _save_id(run: Path, key: str, value: str) -> None:
    ids = {**_ids(run), key: value}
    run.mkdir(parents=True, exist_ok=True)
    (run / _IDS).write_text(json.dumps(ids, indent=2) + "\n", encoding="utf-8")


class TensorBoardLogger:
    """Scalars to TensorBoard event files in ``log_dir``; the config and the summary as text summaries."""

    def __init__(self, log_dir: str | Path, *, config_text: str = "") -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise UserError(
                "tensorboard logging is on but the 'tensorboard' package is not installed; "
                "run `pip install tensorboard` or switch it off in the recipe"
            ) from e
        self._writer = SummaryWriter(log_dir=str(log_dir))
        if config_text:
            self._writer.add_text("run/config", _as_code(config_text), global_step=0)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in _finite(metrics).items():
            self._writer.add_scalar(k, v, global_step=step)

    def add_text(self, tag: str, text: str) -> None:
        self._writer.add_text(tag, _as_code(text), global_step=0)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


def _as_code(text: str) -> str:
    # TensorBoard renders text summaries as Markdown: indented, the text shows as it is.
    return "\n".join("    " + line for line in text.splitlines())


_MLFLOW_SPELLED = {"@": "_at_", "^": "_hat_"}
"""The characters of our own metric names that MLflow refuses, each spelled its own way: pass@4 and
pass^4 are two metrics (their one "_" would have been one key, MLflow mixing both series)."""


def _mlflow_key(key: str) -> str:
    # MLflow keys allow alphanumerics, _ - . / and space; @ and ^ are spelled (pass_at_1, pass_hat_4), others "_".
    return "".join(c if c.isalnum() or c in "_-./ " else _MLFLOW_SPELLED.get(c, "_") for c in key)


class MLflowLogger:
    """Metrics to a local MLflow SQLite store at ``db_path``, one MLflow run (kept on resume)."""

    def __init__(self, db_path: str | Path, *, run_name: str, config: Mapping[str, Any] | None = None,
                 config_text: str = "") -> None:
        try:
            import alembic  # noqa: F401  (the SQLite store's migrations)
            import mlflow
            import sqlalchemy  # noqa: F401
        except ImportError as e:
            raise UserError(
                f"mlflow logging is on but {e.name!r} is not installed; run `pip install mlflow` "
                "(or `pip install mlflow-skinny sqlalchemy alembic`) or switch it off in the recipe"
            ) from e
        db = Path(db_path).resolve()
        db.parent.mkdir(parents=True, exist_ok=True)
        self._run_dir = db.parent
        self._client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}")
        self.run_id = self._open(run_name)
        if config:
            for key, value in list(_flatten(config).items())[:500]:  # MLflow caps a run's params
                self._client.log_param(self.run_id, _mlflow_key(key)[:250], value[:6000])
        if config_text:
            self._client.log_text(self.run_id, config_text, "config.yaml")

    def _open(self, run_name: str) -> str:
        known = _ids(self._run_dir).get("mlflow")
        if known is not None:
            try:
                self._client.update_run(known, status="RUNNING")
                return known
            except Exception:  # noqa: BLE001 - a store without that run (deleted, another db): start a new one
                pass
        exp = self._client.get_experiment_by_name("posttrain")
        exp_id = exp.experiment_id if exp is not None else self._client.create_experiment(
            "posttrain", artifact_location=(self._run_dir / "mlartifacts").as_uri())
        run_id = self._client.create_run(exp_id, run_name=run_name).info.run_id
        _save_id(self._run_dir, "mlflow", run_id)
        return run_id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in _finite(metrics).items():
            self._client.log_metric(self.run_id, _mlflow_key(k), v, step=step)

    def log_artifact(self, path: Path) -> None:
        self._client.log_artifact(self.run_id, str(path))

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


_WANDB_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]")


class WandbLogger:
    """Metrics, config and artefacts to one Weights & Biases run under ``run_dir/wandb`` (kept on resume)."""

    def __init__(self, run_dir: str | Path, *, run_name: str, config: Mapping[str, Any] | None = None) -> None:
        try:
            import wandb
        except ImportError as e:
            raise UserError("wandb logging is on but the 'wandb' package is not installed; run `pip install "
                            "wandb` or switch it off in the recipe") from e
        run = Path(run_dir)
        run.mkdir(parents=True, exist_ok=True)
        run_id = _ids(run).get("wandb") or secrets.token_hex(6)
        settings = wandb.Settings(console="off", silent=True, disable_git=True, save_code=False,
                                  x_disable_stats=True, x_disable_machine_info=True)
        try:
            self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", "posttrain"), name=run_name,
                                   dir=str(run), id=run_id, resume="allow", config=dict(config or {}),
                                   settings=settings)
        except Exception as e:  # noqa: BLE001 - not logged in, no network: one line, before any training
            raise UserError(f"tracking.wandb: W&B could not start a run ({type(e).__name__}: {str(e).splitlines()[0]}); "
                            "run `wandb login`, or set WANDB_MODE=offline to write only RUN/wandb "
                            "(upload later with `wandb sync`)") from None
        _save_id(run, "wandb", run_id)
        self._stages: set[str] = set()

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        values = _finite(metrics)
        for stage in {k.split("/", 1)[0] for k in values if "/" in k} - self._stages:
            self._run.define_metric(f"{stage}/step")
            self._run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
            self._stages.add(stage)
        steps = {f"{k.split('/', 1)[0]}/step": step for k in values if "/" in k}
        if values:
            self._run.log({**values, **steps})

    def log_artifacts(self, paths: Sequence[Path], name: str) -> None:
        import wandb

        artifact = wandb.Artifact(_WANDB_NAME_RE.sub("-", f"run-{name}")[:120], type="posttrain-run")
        for path in paths:
            artifact.add_file(str(path))
        self._run.log_artifact(artifact)

    def close(self) -> None:
        import wandb

        self._run.finish()
        wandb.teardown()  # waits for W&B's service to write everything: after close, RUN/wandb is complete


class MultiLogger:
    """Fans each call out to several loggers (none: a logger that does nothing)."""

    def __init__(self, loggers: Sequence[MetricsLogger]) -> None:
        self.loggers = tuple(loggers)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for lg in self.loggers:
            lg.log(step, metrics)

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()


def _config_of(run: Path) -> tuple[dict[str, Any], str]:
    path = run / "config.yaml"
    if not path.is_file():
        return {}, ""
    text = path.read_text(encoding="utf-8")
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}, text
    return (value if isinstance(value, dict) else {}), text


def make_loggers(run_dir: str | Path, *, tensorboard: bool, mlflow: bool, wandb: bool = False,
                 config: Mapping[str, Any] | None = None) -> MetricsLogger:
    """The loggers a recipe switched on, as one ``MetricsLogger`` (all off: it does nothing). ``config``
    defaults to RUN/config.yaml (the resolved recipe the pipeline saved).

    >>> import tempfile
    >>> lg = make_loggers(tempfile.mkdtemp(), tensorboard=False, mlflow=False)
    >>> lg.log(0, {"loss": 1.0}); lg.close()
    """
    run = Path(run_dir)
    saved, text = _config_of(run)
    config = dict(config) if config is not None else saved
    text = text or (yaml.safe_dump(config, sort_keys=False) if config else "")
    loggers: list[MetricsLogger] = []
    try:
        if tensorboard:
            loggers.append(TensorBoardLogger(run / "tensorboard", config_text=text))
        if mlflow:
            loggers.append(MLflowLogger(run / "mlflow.db", run_name=run.resolve().name, config=config, config_text=text))
        if wandb:
            loggers.append(WandbLogger(run, run_name=run.resolve().name, config=config))
    except UserError:
        MultiLogger(loggers).close()
        raise
    return MultiLogger(loggers)


def publish_artifacts(run_dir: str | Path, *, tensorboard: bool, mlflow: bool, wandb: bool = False) -> list[str]:
    """Send the run's ``ARTEFACTS`` that exist to the trackers switched on (the same runs the metrics
    went to); returns the files sent. Called once the summary and the report are written."""
    run = Path(run_dir)
    files = [run / name for name in ARTEFACTS if (run / name).is_file()]
    if not files or not (tensorboard or mlflow or wandb):
        return []
    if tensorboard:
        tb = TensorBoardLogger(run / "tensorboard")
        summary = run / "summary.json"
        if summary.is_file():
            tb.add_text("run/summary", summary.read_text(encoding="utf-8"))
        tb.add_text("run/artefacts", "\n".join(str(f) for f in files))
        tb.close()
    if mlflow:
        ml = MLflowLogger(run / "mlflow.db", run_name=run.resolve().name)
        for f in files:
            ml.log_artifact(f)
        ml.close()
    if wandb:
        wb = WandbLogger(run, run_name=run.resolve().name)
        wb.log_artifacts(files, run.resolve().name)
        wb.close()
    return [f.name for f in files]
