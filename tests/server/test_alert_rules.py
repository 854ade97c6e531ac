"""The Prometheus alert rules and scrape configuration under deploy/prometheus/ stay in step
with the metrics the parties export: every metric an alert reads exists, every alert says
how severe it is and what it means, and the rules select the scrape job that is configured."""

from __future__ import annotations

import re

import yaml

from server import metrics
from starfish.local import REPO_ROOT

RULES = REPO_ROOT / "deploy" / "prometheus" / "starfish-alerts.yml"
SCRAPE = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",), "info": ("",)}


def exported_names() -> set[str]:
    """Every series name the parties can export (also of labelled metrics with no sample yet)."""
    return {f.name + suffix for f in metrics.REGISTRY.collect() for suffix in SUFFIXES.get(f.type, ("",))}


def test_every_alert_reads_exported_metrics_and_is_documented():
    rules = [r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]]
    names = exported_names()
    alerts = {r["alert"] for r in rules}
    assert {
        "StarfishPartyDown",
        "StarfishPeerUnreachable",
        "StarfishSharePairMismatch",
        "StarfishJobRetrying",
    } <= alerts
    assert {"StarfishTrainingHalted", "StarfishRoundFailed"} <= alerts
    docs = (REPO_ROOT / "docs" / "OPERATIONS.md").read_text()
    for rule in rules:
        used = set(re.findall(r"\bstarfish_[a-z0-9_]+", rule["expr"]))
        assert used - names == set(), f"{rule['alert']} reads metrics no party exports: {used - names}"
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["alert"] in docs, f"{rule['alert']} is not described in docs/OPERATIONS.md"


def test_the_rules_select_the_configured_scrape_job():
    scrape = yaml.safe_load(SCRAPE.read_text())
    jobs = {job["job_name"] for job in scrape["scrape_configs"]}
    assert RULES.name in scrape["rule_files"]
    for job in re.findall(r'up\{job="([^"]+)"\}', RULES.read_text()):
        assert job in jobs
