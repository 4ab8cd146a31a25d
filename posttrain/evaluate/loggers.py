"""Experiment tracking: TensorBoard and MLflow (local store) loggers, off by default.

    logger = make_loggers(run_dir, tensorboard=True, mlflow=False)   # from the recipe's switches
    logger.log(step, {"reward_mean": 0.4, "kl": 0.01})
    logger.close()

- TensorBoard: event files under ``RUN/tensorboard/`` (``torch.utils.tensorboard.SummaryWriter``;
  needs the ``tensorboard`` package). View with ``tensorboard --logdir RUN/tensorboard``.
- MLflow: a local SQLite store ``RUN/mlflow.db`` (MLflow 3 keeps the ``./mlruns`` file store in
  maintenance mode and refuses it by default), experiment ``posttrain``, one MLflow run per
  posttrain run, named after the run directory. Needs ``mlflow`` (or ``mlflow-skinny`` with
  ``sqlalchemy`` and ``alembic``). View with ``mlflow ui --backend-store-uri sqlite:///RUN/mlflow.db``.

Both are optional extras (``pip install tensorboard`` / ``pip install mlflow``):
asking for a logger whose package is absent raises ``UserError`` saying what to install, before
any training starts. Non-finite values are skipped (they are in RUN/metrics.jsonl as written).
What it does not do: write RUN/metrics.jsonl (the trainer does), or talk to a remote server.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from posttrain.errors import UserError

__all__ = ["MetricsLogger", "make_loggers", "TensorBoardLogger", "MLflowLogger", "MultiLogger"]


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


class TensorBoardLogger:
    """Scalars to TensorBoard event files in ``log_dir``."""

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise UserError(
                "tensorboard logging is on but the 'tensorboard' package is not installed; "
                "run `pip install tensorboard` or switch it off in the recipe"
            ) from e
        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in _finite(metrics).items():
            self._writer.add_scalar(k, v, global_step=step)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


def _mlflow_key(key: str) -> str:
    # MLflow keys allow alphanumerics, _ - . / and space; others (pass@1, pass^k) become "_".
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)


class MLflowLogger:
    """Metrics to a local MLflow SQLite store at ``db_path``, one MLflow run."""

    def __init__(self, db_path: str | Path, *, run_name: str) -> None:
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
        self._client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{db}")
        exp = self._client.get_experiment_by_name("posttrain")
        exp_id = exp.experiment_id if exp is not None else self._client.create_experiment("posttrain")
        self._run_id = self._client.create_run(exp_id, run_name=run_name).info.run_id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for k, v in _finite(metrics).items():
            self._client.log_metric(self._run_id, _mlflow_key(k), v, step=step)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


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


def make_loggers(run_dir: str | Path, *, tensorboard: bool, mlflow: bool) -> MetricsLogger:
    """The loggers a recipe switched on, as one ``MetricsLogger`` (both off: it does nothing).

    >>> import tempfile
    >>> lg = make_loggers(tempfile.mkdtemp(), tensorboard=False, mlflow=False)
    >>> lg.log(0, {"loss": 1.0}); lg.close()
    """
    run = Path(run_dir)
    loggers: list[MetricsLogger] = []
    try:
        if tensorboard:
            loggers.append(TensorBoardLogger(run / "tensorboard"))
        if mlflow:
            loggers.append(MLflowLogger(run / "mlflow.db", run_name=run.resolve().name))
    except UserError:
        MultiLogger(loggers).close()
        raise
    return MultiLogger(loggers)
