"""The whole demo, step by step (what `starfish demo` runs):

1. build the federation (`evaluation.simulator.build_federation`: real MNIST, partition,
   one backdoored target) and M_0;
2. start party0 and party1 as processes (`DemoServices`, the helper behind `starfish up`);
   each party starts a job worker process on standby, party0 also the dealer process;
3. Stage I through the service: SDK clients over TLS, T rounds (`stage1.train`);
4. file the unlearn request with the admin RPC and follow the job (`unlearn.via_admin`),
   the remaining clients answering warm-up/correction tasks through the SDK;
5. stop every process; wait for the retrain reference (plaintext, in a background thread since step 1);
6. evaluate the three models; verify the job's erasure certificate offline with the deployment's
   CA certificate (kept as ca.pem beside it); print the tables; write report.json, the plots,
   certificate.json and the job's HTML report page (report.html).

Errors surface as `DemoError` with a message that names the step that failed; the
processes are stopped in every case.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

from client_sdk.evidence import CertificateCheck, check_certificate
from evaluation.demo import report as rep
from evaluation.demo.config import DemoConfig
from evaluation.demo.fleet import Fleet
from evaluation.demo.reference import BackgroundRetrain, evaluator
from evaluation.demo.services import DemoServices
from evaluation.demo.stage1 import StageOne, train
from evaluation.demo.unlearn import UnlearnOutcome, via_admin
from evaluation.experiment import json_ready
from evaluation.metrics import model_gap
from evaluation.models import build_model, initial_model, num_parameters
from evaluation.simulator import build_federation
from starfish.report_page import render_page

Say = Callable[[str], None]
REPORT_FILE = "report.json"
METRICS_PLOT = "metrics.png"
COSTS_PLOT = "unlearning-costs.png"
CERTIFICATE_FILE = "certificate.json"
CA_FILE = "ca.pem"
REPORT_PAGE = "report.html"


class DemoError(RuntimeError):
    """A demo step failed; the message names the step and the cause."""


class _Steps:
    """Wall time of each demo step, and which step is running (for error messages)."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.current = "start"
        self.rows: list[dict[str, Any]] = []

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        self.current = name
        self.say(f"\n== {name}")
        start = time.perf_counter()
        out = fn()
        self.rows.append({"step": name, "seconds": time.perf_counter() - start, "bytes_text": "—"})
        return out


def run_demo(cfg: DemoConfig, out_dir: Path, say: Say = print, keep_deployment: bool = False) -> dict[str, Any]:
    """Run the demo; returns the report (also written to `out_dir/report.json`)."""
    cfg.validate()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = _Steps(say)
    started = time.perf_counter()
    try:
        return _run(cfg, out_dir, steps, say, keep_deployment, started)
    except DemoError:
        raise
    except Exception as exc:
        raise DemoError(f"step '{steps.current}' failed: {type(exc).__name__}: {exc}") from exc


def _run(cfg: DemoConfig, out_dir: Path, steps: _Steps, say: Say, keep: bool, started: float) -> dict[str, Any]:
    torch.set_num_threads(1)  # the clients run in threads; one intra-op thread each uses the cores best
    say("Starfish demo: federated learning with secret-shared history, then unlearning a backdoored client under 2PC")
    say("\nWhat is scaled from the paper's setting:")
    for line in rep.table(["setting", "paper", "this run"], cfg.scaling_rows(), numeric=False):
        say("  " + line)

    fed = steps.run("load MNIST and partition it among the clients", lambda: build_federation(cfg.simulation()))
    sim = fed.config
    targets = fed.targets
    m0 = initial_model(sim.architecture, sim.seed)
    n_params = num_parameters(build_model(sim.architecture))
    say(
        f"  {len(fed.clients)} clients, {sum(c.n_samples for c in fed.clients)} training samples (target {targets[0]} has "
        f"{fed.client(targets[0]).n_samples} incl. its triggered copies), {len(fed.dataset.test_y)} test images; "
        f"model {sim.architecture} with {n_params:,} parameters"
    )

    say(
        f"  the retrain reference ({cfg.rounds} rounds without {', '.join(targets)}, plaintext) starts in the background"
    )
    retrain = BackgroundRetrain(fed, m0, cfg.rounds).start()
    deploy_root = Path(tempfile.mkdtemp(prefix="deployment-", dir=out_dir))
    services = DemoServices(
        deploy_root, [c.client_id for c in fed.clients], cfg.rounds, cfg.round_deadline_s, cfg.task_deadline_s
    )
    ev = evaluator(fed)
    stage1: StageOne
    outcome: UnlearnOutcome
    fleet: Fleet | None = None
    try:
        steps.run("start party0 and party1 (processes, TLS on loopback)", services.start)
        for line in services.describe():
            say("  " + line)
        processes = {f"party{r}": p.pid for r, p in services.deployment.procs.items()}
        fleet = Fleet(fed, services.deployment.client)
        stage1 = steps.run(
            f"Stage I: {cfg.rounds} FedAvg rounds through the service ({len(fed.clients)} SDK clients)",
            lambda: train(services, fleet, m0, cfg.rounds, say, cfg.round_deadline_s * cfg.rounds),
        )
        steps.rows[-1]["bytes_text"] = (
            f"{rep.mb(stage1.client_bytes)} client shares + {rep.mb(stage1.peer_bytes)} party↔party"
        )
        before = steps.run("metrics of M_T before unlearning", lambda: ev.evaluate(stage1.models[-1]))
        say(
            f"  TER {100 * before['ter']:.1f} %, BA-ASR {100 * before['ba_asr']:.1f} %, MIA-ASR {100 * before['mia_asr']:.1f} %"
        )
        fleet.serve_tasks(exclude=targets)
        outcome = steps.run(
            f"Stage II: unlearn {', '.join(targets)} with Starfish under 2PC (admin RPC → job)",
            lambda: via_admin(services.deployment, targets, cfg.unlearning_params, say, cfg.job_timeout_s),
        )
        shutil.copyfile(services.deployment.ca_cert, out_dir / CA_FILE)  # verifies the certificate later
        job_pids = services.job_pids()
        say(
            "  2PC session processes: "
            + ", ".join(f"{name} pid {', '.join(map(str, p)) or '?'}" for name, p in job_pids.items())
        )
        _check_installed(fleet, outcome, cfg.rounds, say)
        # what the service side did, for the report: process ids, per-client activity
        facts: dict[str, Any] = {
            "processes": {**processes, **job_pids},
            "clients": [vars(c.run_info) for c in fleet.clients],  # rounds, bytes sent, training seconds, tasks
            "tasks_answered": fleet.tasks_answered,
        }
    finally:
        if fleet is not None:
            fleet.close()
        services.stop()
        services.collect_logs(out_dir / "logs")
        if not keep:
            shutil.rmtree(deploy_root, ignore_errors=True)
    m_retrain = steps.run(
        f"retrain reference: {cfg.rounds} FedAvg rounds without {', '.join(targets)} (plaintext, local)", retrain.result
    )
    steps.rows[-1]["seconds"] = retrain.seconds  # it ran in the background, overlapping the steps above
    steps.rows[-1]["bytes_text"] = "— (ran in the background during Stage I/II)"
    metrics = steps.run(
        "metrics of M̂ and of the retrain model",
        lambda: {"before": before, "starfish": ev.evaluate(outcome.model), "retrain": ev.evaluate(m_retrain)},
    )
    gaps = {"before": model_gap(stage1.models[-1], m_retrain), "starfish": model_gap(outcome.model, m_retrain)}
    facts["certificate"] = steps.run(
        "verify the erasure certificate (offline, with the deployment's CA certificate)",
        lambda: _verify_certificate(outcome, out_dir, say),
    )
    return _finish(cfg, out_dir, steps, say, started, fed, stage1, outcome, metrics, gaps, facts)


def _verify_certificate(outcome: UnlearnOutcome, out_dir: Path, say: Say) -> CertificateCheck:
    """Write certificate.json and check both signatures as a compliance officer would."""
    if not outcome.certificate_json:
        raise DemoError(f"job {outcome.job_id} has no signed erasure certificate (see its report's 'certificate')")
    (out_dir / CERTIFICATE_FILE).write_text(outcome.certificate_json)
    check = check_certificate(outcome.certificate_json, [out_dir / CA_FILE])
    for line in check.explain():
        say("  " + line)
    if not check.valid:
        raise DemoError("the erasure certificate does not verify: " + "; ".join(check.problems))
    if check.statement["models"]["unlearned"]["hash"] != outcome.model_hash:
        raise DemoError("the erasure certificate names another model than the one the job produced")
    return check


def _check_installed(fleet: Fleet, outcome: UnlearnOutcome, rounds: int, say: Say) -> None:
    """Both parties must now serve M̂ as global model T+1 (the SDK refuses a mismatch)."""
    served = fleet.clients[0].sdk.fetch_model(rounds + 1)
    if served.hash != outcome.model_hash:
        raise DemoError(
            f"the parties serve {served.hash[:12]} as global model {rounds + 1}, the job produced "
            f"{outcome.model_hash[:12]}"
        )
    say(f"  both parties serve M̂ ({served.hash[:12]}) as global model {rounds + 1}; training can continue from it")


def _finish(
    cfg: DemoConfig,
    out_dir: Path,
    steps: _Steps,
    say: Say,
    started: float,
    fed,
    stage1: StageOne,
    outcome: UnlearnOutcome,
    metrics: dict,
    gaps: dict,
    facts: dict[str, Any],
) -> dict[str, Any]:
    job = outcome.report
    job_steps = rep.job_steps(job.get("costs", {}))
    rows = []
    for row in steps.rows:
        rows.append(row)
        if row["step"].startswith("Stage II"):
            online = sum(s["online_bytes"] for s in job_steps)
            offline = sum(s["offline_bytes"] for s in job_steps)
            row["bytes_text"] = f"{rep.mb(online)} online + {rep.mb(offline)} offline"
            rows.extend(job_steps)
    total = time.perf_counter() - started
    files = [
        out_dir / REPORT_FILE,
        out_dir / REPORT_PAGE,
        out_dir / CERTIFICATE_FILE,
        out_dir / CA_FILE,
        out_dir / METRICS_PLOT,
        out_dir / COSTS_PLOT,
        out_dir / "logs",
    ]
    report = json_ready(
        {
            "config": cfg.as_dict(),
            "scaling": [{"setting": a, "paper": b, "this_run": c} for a, b, c in cfg.scaling_rows()],
            "targets": list(fed.targets),
            "processes": facts["processes"],
            "job_id": outcome.job_id,
            "certificate": {
                "file": CERTIFICATE_FILE,
                "valid": facts["certificate"].valid,
                "statement_sha256": facts["certificate"].verification.statement_sha256,
                "signers": [s.signer for s in facts["certificate"].signers],
            },
            "metrics": metrics,
            "gap_to_retrain": gaps,
            "stage1": {
                "seconds": stage1.seconds,
                "client_bytes": stage1.client_bytes,
                "peer_bytes": stage1.peer_bytes,
                "model_hashes": stage1.model_hashes,
                "rounds": [vars(r) for r in stage1.rounds],
            },
            "clients": facts["clients"],
            "unlearning": {
                "seconds": outcome.seconds,
                "model_hash": outcome.model_hash,
                "statuses": outcome.statuses,
                "tasks_answered": facts["tasks_answered"],
                "job_summary": outcome.summary,
                "job_report": job,
            },
            "steps": rows,
            "total_seconds": total,
            "files": [str(f) for f in files],
        }
    )
    rep.write_json(out_dir / REPORT_FILE, report)
    (out_dir / REPORT_PAGE).write_text(render_page(job, facts["certificate"], metrics, CERTIFICATE_FILE))
    title = f"{cfg.architecture} on {cfg.dataset}, {cfg.num_clients} clients, T={cfg.rounds}, target {fed.targets[0]}"
    rep.plot_metrics(out_dir / METRICS_PLOT, metrics, title)
    rep.plot_costs(out_dir / COSTS_PLOT, job_steps, f"Starfish under 2PC: {title}")

    say("\n== results")
    for line in rep.metrics_table(metrics, gaps):
        say("  " + line)
    sel = job.get("selection", {})
    say(
        f"\n  selected rounds {sel.get('selected_rounds')} of T={job.get('stored_rounds', cfg.rounds)}; "
        f"{len(job.get('flags', []))} threshold checks; ARP {job.get('arp_percent', float('nan')):.1f} %"
    )
    for target, parts in sorted(job.get("erasure", {}).items()):
        for r in parts:
            say(
                f"  erased {target} on party{r['party']}: {len(r['rounds'])} rounds of shares, {r['files_deleted']} files, "
                f"{r['bytes_deleted']:,} bytes"
            )
    say("\n  time and bytes per step")
    for line in rep.cost_table(rows):
        say("  " + line)
    say(f"\n  total wall time {total:.0f} s")
    say("\n  files written")
    for f in files:
        say(f"  {f}")
    return report
