"""A Flower app on MNIST (the project's data package, nothing downloaded) that trains with
Starfish: a plain Flower ClientApp and ServerApp plus the Starfish lines marked `# Starfish`.

Clients train `mnist_mlp` (784→64→10, 50,890 parameters) for one local epoch of SGD on an
IID shard of MNIST's 60,000 training images; the server evaluates the global model on
the 10,000 test images. Each client's evaluate function scores a model on its own shard of
the test images (its held-out data) and replies with Flower's metrics "accuracy" and
"num-examples": `StarfishMod` answers a job's federated evaluation with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from client_sdk.admin import AdminClient
from evaluation.datasets import load_dataset
from evaluation.models import build_model
from evaluation.partition import iid_partition
from starfish_flower import Parties, StarfishFedAvg, StarfishMod, identity_from_credentials

ARCH = "mnist_mlp"
SHARD_SEED = 0


def new_model() -> nn.Module:
    return build_model(ARCH, seed=0)


@lru_cache(maxsize=1)
def _mnist():
    return load_dataset("mnist")


def client_shard(partition_id: int, num_partitions: int) -> TensorDataset:
    data = _mnist()
    idx = iid_partition(len(data.train_y), num_partitions, SHARD_SEED)[partition_id]
    return TensorDataset(torch.from_numpy(data.train_x[idx]), torch.from_numpy(data.train_y[idx]))


def client_test_shard(partition_id: int, num_partitions: int) -> TensorDataset:
    """The node's held-out data: its IID shard of the 10,000 test images."""
    data = _mnist()
    idx = iid_partition(len(data.test_y), num_partitions, SHARD_SEED)[partition_id]
    return TensorDataset(torch.from_numpy(data.test_x[idx]), torch.from_numpy(data.test_y[idx]))


def local_train(net: nn.Module, shard: TensorDataset, epochs: int, lr: float) -> float:
    """Plain local SGD; returns the mean training loss of the last epoch."""
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    loss_fn, total, seen = nn.CrossEntropyLoss(), 0.0, 0
    for _ in range(epochs):
        total, seen = 0.0, 0
        for x, y in DataLoader(shard, batch_size=32, shuffle=True):
            opt.zero_grad()
            loss = loss_fn(net(x), y)
            loss.backward()
            opt.step()
            total, seen = total + loss.item() * len(y), seen + len(y)
    return total / max(seen, 1)


def test_metrics(net: nn.Module) -> dict[str, float]:
    data = _mnist()
    with torch.no_grad():
        logits = net(torch.from_numpy(data.test_x))
        y = torch.from_numpy(data.test_y)
        return {
            "loss": nn.functional.cross_entropy(logits, y).item(),
            "accuracy": (logits.argmax(1) == y).float().mean().item(),
        }


def train(msg: Message, context: Context) -> Message:
    """The app's train function: one local epoch on this node's shard, the fitted model and n."""
    net = new_model()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    config = msg.content["config"]
    shard = client_shard(int(context.node_config["partition-id"]), int(context.node_config["num-partitions"]))
    loss = local_train(net, shard, int(config["local-epochs"]), float(config["client-lr"]))
    metrics = MetricRecord({"num-examples": len(shard), "train-loss": loss})
    return Message(RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg)


def evaluate(msg: Message, context: Context) -> Message:
    """The app's evaluate function: loss and accuracy of the model on this node's held-out
    shard, with "num-examples" (Flower's convention, which Starfish's federated evaluation reads)."""
    net = new_model()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    node = context.node_config
    x, y = client_test_shard(int(node["partition-id"]), int(node["num-partitions"])).tensors
    with torch.no_grad():
        logits = net(x)
    metrics = {
        "num-examples": len(y),
        "loss": nn.functional.cross_entropy(logits, y).item(),
        "accuracy": (logits.argmax(1) == y).float().mean().item(),
    }
    return Message(RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


def make_client_app(parties: Parties | None, credentials: Path | None) -> ClientApp:
    """The ClientApp; with `parties`, every update goes to the Starfish parties as shares."""
    mods = [] if parties is None else [StarfishMod(parties, identity_from_credentials(credentials))]  # Starfish
    app = ClientApp(mods=mods)
    app.train()(train)
    app.evaluate()(evaluate)
    return app


@dataclass
class Plan:
    """What the ServerApp does: rounds, sampling, whom to forget."""

    rounds: int = 5
    rounds_after: int = 3
    fraction_train: float = 0.5
    client_lr: float = 0.05
    local_epochs: int = 1
    forget: str | None = "auto"  #: a client id, "auto" (the first member of the first round) or None
    unlearn_parameters: dict | None = None


def make_server_app(plan: Plan, admin: AdminClient | None, log: list[dict]) -> ServerApp:
    """The ServerApp; with `admin` it runs every round through the Starfish parties and
    unlearns `plan.forget`; without, it is plain Flower FedAvg."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        def central_eval(server_round: int, arrays: ArrayRecord) -> MetricRecord:
            net = new_model()
            net.load_state_dict(arrays.to_torch_state_dict())
            metrics = test_metrics(net)
            log.append({"phase": phase, "round": server_round, "at": time.time(), **metrics})
            return MetricRecord(metrics)

        config = ConfigRecord({"client-lr": plan.client_lr, "local-epochs": plan.local_epochs})
        sampling = {"fraction_train": plan.fraction_train, "fraction_evaluate": 0.0, "min_available_nodes": 2}
        if admin is None:
            strategy = FedAvg(**sampling)
        else:
            strategy = StarfishFedAvg(
                admin, ARCH, 1.0, **sampling
            )  # Starfish: η = 1 reproduces FedAvg of the fitted models
        phase = "train"
        initial = ArrayRecord(new_model().state_dict())
        strategy.start(grid, initial, plan.rounds, train_config=config, evaluate_fn=central_eval)
        if admin is None or plan.forget is None:
            return
        target = min(strategy.rounds[0].members) if plan.forget == "auto" else plan.forget
        outcome = strategy.unlearn(grid, [target], plan.unlearn_parameters)  # Starfish
        log.append({"phase": "unlearn", "target": target, "job": outcome.job_id, "succeeded": outcome.succeeded})
        log[-1]["error"] = outcome.error
        if not outcome.succeeded:
            return
        phase = "after unlearning"
        strategy.start(grid, outcome.arrays, plan.rounds_after, train_config=config, evaluate_fn=central_eval)

    return app
