"""The ServerApp: Flower's round loop with `StarfishFedAvg`, then an unlearning request and
more rounds from the unlearned model; every erasure certificate is verified. Everything
Starfish needs is read from the run config when the app runs (`starfish_flower.app_config`)."""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from mnist_app import ARCH, new_model, test_metrics

from starfish_flower import StarfishFedAvg, logs
from starfish_flower.app_config import StarfishConfig
from starfish_flower.certificates import verified

app = ServerApp()
log = logs.get("server_app")


def central_eval(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    net = new_model()
    net.load_state_dict(arrays.to_torch_state_dict())
    return MetricRecord(test_metrics(net))


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    starfish = StarfishConfig.from_context(context)  # Starfish
    train_config = ConfigRecord({"client-lr": float(cfg["client-lr"]), "local-epochs": int(cfg["local-epochs"])})
    with starfish.admin() as admin:
        strategy = StarfishFedAvg(  # Starfish: instead of FedAvg; η = 1 reproduces FedAvg of the fitted models
            admin,
            ARCH,
            1.0,
            fraction_train=float(cfg["fraction-train"]),
            fraction_evaluate=0.0,
            min_available_nodes=int(cfg["min-available-nodes"]),
        )
        initial = ArrayRecord(new_model().state_dict())
        result = strategy.start(
            grid, initial, int(cfg["num-server-rounds"]), train_config=train_config, evaluate_fn=central_eval
        )
        forget = str(cfg["starfish-forget"])
        if forget != "none":
            target = min(strategy.rounds[0].members) if forget == "auto" else forget
            strategy.unlearn(grid, [target], json.loads(str(cfg["starfish-unlearn-parameters"])))  # Starfish
        strategy.settle(grid)  # a job a client filed for itself in the last round
        for outcome in strategy.outcomes:
            if not outcome.succeeded:
                raise RuntimeError(f"unlearning job {outcome.job_id} failed: {outcome.error}")
            check = verified(admin, outcome.job_id, starfish.ca_cert, outcome.arrays)
            if str(cfg["certificate-dir"]):
                out = Path(str(cfg["certificate-dir"])) / f"{outcome.job_id}.json"
                out.write_text(json.dumps(check.document))
                log.info("Starfish: certificate of job %s written to %s", outcome.job_id, out)
        if strategy.outcomes and int(cfg["rounds-after"]) > 0:
            arrays = strategy.outcomes[-1].arrays
            result = strategy.start(
                grid, arrays, int(cfg["rounds-after"]), train_config=train_config, evaluate_fn=central_eval
            )
        log.info(
            "Starfish: %d rounds committed, %d unlearning job(s), forgotten: %s",
            len(strategy.rounds),
            len(strategy.outcomes),
            sorted(strategy.forgotten) or "none",
        )
        log.info(
            "Starfish: final test metrics %s",
            result.evaluate_metrics_serverapp.get(max(result.evaluate_metrics_serverapp, default=0)),
        )
