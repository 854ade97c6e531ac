"""A tiny Flower app for the integration tests: L2-regularised logistic regression (numpy)
on per-node synthetic data, trained by a few full-batch gradient steps, so every fitted
model is a deterministic function of the model it starts from (the test recomputes it)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

DIM = 6
STEPS = 3
STEP = 0.5
L2 = 1e-2
NODES = 4


def initial_arrays() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.zeros(DIM, dtype=np.float32)), "b": Array(np.zeros(1, dtype=np.float32))})


def node_data(partition: int) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of one node (node 0's labels are flipped: the one to forget)."""
    rng = np.random.default_rng(50 + partition)  # test data only, not a secret
    w_true = np.random.default_rng(7).standard_normal(DIM)
    x = rng.standard_normal((16 + 4 * partition, DIM))
    y = (x @ w_true > 0).astype(np.float64)
    return x, (1.0 - y if partition == 0 else y)


def fit(w: np.ndarray, b: np.ndarray, partition: int) -> tuple[np.ndarray, np.ndarray, float]:
    """STEPS full-batch gradient steps; returns (w, b, final loss)."""
    x, y = node_data(partition)
    w, b = w.astype(np.float64), b.astype(np.float64)
    for _ in range(STEPS):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b[0])))
        w = w - STEP * (x.T @ (p - y) / len(y) + L2 * w)
        b = b - STEP * np.array([np.mean(p - y)])
    p = np.clip(1.0 / (1.0 + np.exp(-(x @ w + b[0]))), 1e-9, 1 - 1e-9)
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return w.astype(np.float32), b.astype(np.float32), loss


def accuracy(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """The fraction of (x, y) the model (w, b) classifies correctly (the app's evaluate metric)."""
    return float(np.mean(((x @ w + b[0]) > 0) == y))


def make_client_app(mods: list) -> ClientApp:
    app = ClientApp(mods=mods)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"]
        partition = int(context.node_config["partition-id"])
        w, b, loss = fit(arrays["w"].numpy(), arrays["b"].numpy(), partition)
        metrics = MetricRecord({"num-examples": len(node_data(partition)[1]), "train-loss": loss})
        return Message(
            RecordDict({"arrays": ArrayRecord({"w": Array(w), "b": Array(b)}), "metrics": metrics}), reply_to=msg
        )

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"]
        x, y = node_data(int(context.node_config["partition-id"]))
        score = accuracy(arrays["w"].numpy(), arrays["b"].numpy(), x, y)
        metrics = MetricRecord({"num-examples": len(y), "accuracy": score})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    return app
