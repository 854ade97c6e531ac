"""The whole demo, step by step (what `starfish demo` runs):

1. build the federation (`evaluation.simulator.build_federation`: real MNIST, partition,
   one backdoored target) and M_0;
2. start the dealer service, party0 and party1 as processes (`DemoServices`, the helper
   behind `starfish up`); each party starts a job worker process on standby;
3. Stage I through the service: SDK clients over TLS, T rounds (`stage1.train`);
4. file the unlearn request with the admin RPC and follow the job (`unlearn.via_admin`),
   the remaining clients answering warm-up/correction tasks through the SDK; then wait for
   the job's federated evaluation (`unlearn.await_evaluation`: each remaining client scores
   M̂ and M_T on its own shard of the test set and on its triggered probe images,
   `fleet.HeldOut`; only the 2PC sums are revealed, in the job report and on the page);
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from client_sdk.evidence import CertificateCheck, check_certificate
from evaluation.experiment import json_ready
from evaluation.models import build_model, initial_model, num_parameters
from evaluation.simulator import build_federation
from evaluation.unlearning_metrics import model_gap
from harness.demo import demo_report as rep
from harness.demo.demo_config import DemoConfig
from harness.demo.fleet import Fleet
from harness.demo.processes import DemoServices
from harness.demo.reference import BackgroundRetrain, evaluator
from harness.demo.stage1 import StageOne, train
from harness.demo.unlearn import UnlearnOutcome, await_evaluation, via_admin
from harness.report_page import render_page

Say = Callable[[str], None]
REPORT_FILE = "report.json"
METRICS_PLOT = "metrics.png"
COSTS_PLOT = "unlearning-costs.png"
CERTIFICATE_FILE = "certificate.json"
CA_FILE = "ca.pem"
REPORT_PAGE = "report.html"
#: the parties end the evaluation after `[evaluation] deadline_s` (30 s); this bounds the wait for it
EVALUATION_TIMEOUT_S = 120.0


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
    demo = _Demo(cfg, out_dir, say, keep_deployment)
    try:
        return demo.run()
    except DemoError:
        raise
    except Exception as exc:
        raise DemoError(f"step '{demo.steps.current}' failed: {type(exc).__name__}: {exc}") from exc


@dataclass
class _ServicePhase:
    """What steps 2–4 produced (the parties are stopped by then)."""

    stage1: StageOne
    before: dict[str, float]
    outcome: UnlearnOutcome
    facts: dict[str, Any]  #: process ids, per-client activity, tasks answered


class _Demo:
    """One demo run: the steps of the module docstring."""

    def __init__(self, cfg: DemoConfig, out_dir: Path, say: Say, keep: bool) -> None:
        self.cfg, self.out_dir, self.say, self.keep = cfg, out_dir, say, keep
        self.steps = _Steps(say)
        self.started = time.perf_counter()

    def run(self) -> dict[str, Any]:
        cfg, say, steps = self.cfg, self.say, self.steps
        torch.set_num_threads(1)  # the clients run in threads; one intra-op thread each uses the cores best
        say(
            "Starfish demo: federated learning with secret-shared history, "
            "then unlearning a backdoored client under 2PC"
        )
        say("\nWhat is scaled from the paper's setting:")
        for line in rep.table(["setting", "paper", "this run"], cfg.scaling_rows(), numeric=False):
            say("  " + line)
        fed = steps.run("load MNIST and partition it among the clients", lambda: build_federation(cfg.simulation()))
        m0 = initial_model(fed.config.architecture, fed.config.seed)
        self._describe(fed)
        targets = ", ".join(fed.targets)
        say(f"  the retrain reference ({cfg.rounds} rounds without {targets}, plaintext) starts in the background")
        retrain = BackgroundRetrain(fed, m0, cfg.rounds).start()
        ev = evaluator(fed)
        phase = self._through_the_service(fed, m0, ev)
        m_retrain = steps.run(
            f"retrain reference: {cfg.rounds} FedAvg rounds without {targets} (plaintext, local)", retrain.result
        )
        steps.rows[-1]["seconds"] = retrain.seconds  # it ran in the background, overlapping the steps above
        steps.rows[-1]["bytes_text"] = "— (ran in the background during Stage I/II)"
        metrics = steps.run(
            "metrics of M̂ and of the retrain model",
            lambda: {
                "before": phase.before,
                "starfish": ev.evaluate(phase.outcome.model),
                "retrain": ev.evaluate(m_retrain),
            },
        )
        gaps = {
            "before": model_gap(phase.stage1.models[-1], m_retrain),
            "starfish": model_gap(phase.outcome.model, m_retrain),
        }
        phase.facts["certificate"] = steps.run(
            "verify the erasure certificate (offline, with the deployment's CA certificate)",
            lambda: _verify_certificate(phase.outcome, self.out_dir, say),
        )
        return self._finish(fed, phase, metrics, gaps)

    def _describe(self, fed) -> None:
        sim, target = fed.config, fed.targets[0]
        n_params = num_parameters(build_model(sim.architecture))
        self.say(
            f"  {len(fed.clients)} clients, {sum(c.n_samples for c in fed.clients)} training samples (target {target} "
            f"has {fed.client(target).n_samples} incl. its triggered copies), {len(fed.dataset.test_y)} test images; "
            f"model {sim.architecture} with {n_params:,} parameters"
        )

    def _through_the_service(self, fed, m0: torch.Tensor, ev) -> _ServicePhase:
        """Steps 2–5: the parties, Stage I, Stage II; the processes are stopped in every case."""
        cfg, steps = self.cfg, self.steps
        deploy_root = Path(tempfile.mkdtemp(prefix="deployment-", dir=self.out_dir))
        probe = f"backdoor trigger on images of other labels, answered with label {fed.trigger.target_label}"
        services = DemoServices(
            deploy_root,
            [c.client_id for c in fed.clients],
            cfg.rounds,
            cfg.round_deadline_s,
            cfg.task_deadline_s,
            probe,
        )
        fleet: Fleet | None = None
        try:
            steps.run("start party0 and party1 (processes, TLS on loopback)", services.start)
            for line in services.describe():
                self.say("  " + line)
            fleet = Fleet(fed, services.deployment.client)
            stage1, before = self._stage1(services, fleet, m0, ev)
            fleet.serve_tasks(exclude=fed.targets)
            outcome = steps.run(
                f"Stage II: unlearn {', '.join(fed.targets)} with Starfish under 2PC (admin RPC → job)",
                lambda: via_admin(services.deployment, fed.targets, cfg.unlearning_params, self.say, cfg.job_timeout_s),
            )
            steps.run(
                "federated evaluation: the remaining clients score M̂ and M_T on their own test data (2PC sums)",
                lambda: await_evaluation(services.deployment, outcome, self.say, EVALUATION_TIMEOUT_S),
            )
            shutil.copyfile(services.deployment.ca_cert, self.out_dir / CA_FILE)  # verifies the certificate later
            job_pids = services.job_pids()
            pids = ", ".join(f"{name} pid {', '.join(map(str, p)) or '?'}" for name, p in job_pids.items())
            self.say("  2PC session processes: " + pids)
            _check_installed(fleet, outcome, cfg.rounds, self.say)
            facts = {
                "processes": {**{f"party{r}": p.pid for r, p in services.deployment.procs.items()}, **job_pids},
                "clients": [vars(c.run_info) for c in fleet.clients],  # rounds, bytes sent, training seconds, tasks
                "tasks_answered": fleet.tasks_answered,
            }
        finally:
            if fleet is not None:
                fleet.close()
            services.stop()
            services.collect_logs(self.out_dir / "logs")
            if not self.keep:
                shutil.rmtree(deploy_root, ignore_errors=True)
        return _ServicePhase(stage1, before, outcome, facts)

    def _stage1(self, services: DemoServices, fleet: Fleet, m0: torch.Tensor, ev) -> tuple[StageOne, dict]:
        cfg, steps = self.cfg, self.steps
        stage1 = steps.run(
            f"Stage I: {cfg.rounds} FedAvg rounds through the service ({len(fleet.clients)} SDK clients)",
            lambda: train(services, fleet, m0, cfg.rounds, self.say, cfg.round_deadline_s * cfg.rounds),
        )
        steps.rows[-1]["bytes_text"] = (
            f"{rep.mb(stage1.client_bytes)} client shares + {rep.mb(stage1.peer_bytes)} party↔party"
        )
        before = steps.run("metrics of M_T before unlearning", lambda: ev.evaluate(stage1.models[-1]))
        self.say(
            f"  TER {100 * before['ter']:.1f} %, BA-ASR {100 * before['ba_asr']:.1f} %, "
            f"MIA-ASR {100 * before['mia_asr']:.1f} %"
        )
        return stage1, before

    def _finish(self, fed, phase: _ServicePhase, metrics: dict, gaps: dict) -> dict[str, Any]:
        """Step 6: the report, the plots and the printed tables."""
        cfg, out_dir = self.cfg, self.out_dir
        job = phase.outcome.report
        job_steps = rep.job_steps(job.get("costs", {}))
        rows = _with_job_steps(self.steps.rows, job_steps)
        total = time.perf_counter() - self.started
        files = [
            out_dir / REPORT_FILE,
            out_dir / REPORT_PAGE,
            out_dir / CERTIFICATE_FILE,
            out_dir / CA_FILE,
            out_dir / METRICS_PLOT,
            out_dir / COSTS_PLOT,
            out_dir / "logs",
        ]
        report = _report(cfg, fed, phase, metrics, gaps, rows, total, files)
        rep.write_json(out_dir / REPORT_FILE, report)
        page = render_page(job, phase.facts["certificate"], metrics, CERTIFICATE_FILE)
        (out_dir / REPORT_PAGE).write_text(page)
        title = (
            f"{cfg.architecture} on {cfg.dataset}, {cfg.num_clients} clients, T={cfg.rounds}, target {fed.targets[0]}"
        )
        rep.plot_metrics(out_dir / METRICS_PLOT, metrics, title)
        rep.plot_costs(out_dir / COSTS_PLOT, job_steps, f"Starfish under 2PC: {title}")
        _print_results(self.say, cfg, job, metrics, gaps, rows)
        self.say(f"\n  total wall time {total:.0f} s")
        self.say("\n  files written")
        for f in files:
            self.say(f"  {f}")
        return report


def _with_job_steps(rows: list[dict[str, Any]], job_steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The demo's steps with the job's own steps listed under Stage II (whose bytes they sum)."""
    out = []
    for row in rows:
        out.append(row)
        if row["step"].startswith("Stage II"):
            online = sum(s["online_bytes"] for s in job_steps)
            offline = sum(s["offline_bytes"] for s in job_steps)
            row["bytes_text"] = f"{rep.mb(online)} online + {rep.mb(offline)} offline"
            out.extend(job_steps)
    return out


def _report(
    cfg: DemoConfig, fed, phase: _ServicePhase, metrics: dict, gaps: dict, rows: list, total: float, files: list[Path]
) -> dict[str, Any]:
    """report.json: settings, processes, metrics, Stage I facts, the job's report and the step costs."""
    stage1, outcome = phase.stage1, phase.outcome
    return json_ready(
        {
            "config": cfg.as_dict(),
            "scaling": [{"setting": a, "paper": b, "this_run": c} for a, b, c in cfg.scaling_rows()],
            "targets": list(fed.targets),
            "processes": phase.facts["processes"],
            "job_id": outcome.job_id,
            "certificate": _certificate_summary(phase.facts["certificate"]),
            "metrics": metrics,
            "gap_to_retrain": gaps,
            "stage1": {
                "seconds": stage1.seconds,
                "client_bytes": stage1.client_bytes,
                "peer_bytes": stage1.peer_bytes,
                "model_hashes": stage1.model_hashes,
                "rounds": [vars(r) for r in stage1.rounds],
            },
            "clients": phase.facts["clients"],
            "unlearning": {
                "seconds": outcome.seconds,
                "model_hash": outcome.model_hash,
                "statuses": outcome.statuses,
                "tasks_answered": phase.facts["tasks_answered"],
                "job_summary": outcome.summary,
                "job_report": outcome.report,
            },
            "steps": rows,
            "total_seconds": total,
            "files": [str(f) for f in files],
        }
    )


def _certificate_summary(check: CertificateCheck) -> dict[str, Any]:
    """What report.json says about the erasure certificate (the file itself sits beside it)."""
    return {
        "file": CERTIFICATE_FILE,
        "valid": check.valid,
        "statement_sha256": check.verification.statement_sha256,
        "signers": [s.signer for s in check.signers],
    }


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


def _print_results(say: Say, cfg: DemoConfig, job: dict, metrics: dict, gaps: dict, rows: list) -> None:
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
                f"  erased {target} on party{r['party']}: {len(r['rounds'])} rounds of shares, "
                f"{r['files_deleted']} files, {r['bytes_deleted']:,} bytes"
            )
    say("\n  time and bytes per step")
    for line in rep.cost_table(rows):
        say("  " + line)


def _check_installed(fleet: Fleet, outcome: UnlearnOutcome, rounds: int, say: Say) -> None:
    """Both parties must now serve M̂ as global model T+1 (the SDK refuses a mismatch)."""
    served = fleet.clients[0].sdk.fetch_model(rounds + 1)
    if served.hash != outcome.model_hash:
        raise DemoError(
            f"the parties serve {served.hash[:12]} as global model {rounds + 1}, the job produced "
            f"{outcome.model_hash[:12]}"
        )
    say(f"  both parties serve M̂ ({served.hash[:12]}) as global model {rounds + 1}; training can continue from it")
