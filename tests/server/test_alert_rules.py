"""The Prometheus alert rules and scrape configuration under deploy/prometheus/ stay in step
with the metrics the parties export: every metric an alert reads exists, every alert says
how severe it is and what it means, and the rules select the scrape job that is configured."""

from __future__ import annotations

import math
import re
import time

import yaml

from harness.local import REPO_ROOT
from server import metrics

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


def test_certificate_expiry_is_exported_per_use_and_follows_the_files(tmp_path):
    from mpc.plane.certificate_authority import issue_cert, make_ca, not_after

    make_ca(tmp_path)
    cert, _ = issue_cert(tmp_path, "party0", valid_days=10)
    metrics.watch_certificates({"tls": cert, "ca": tmp_path / "ca.pem", "signing": None})
    value = metrics.REGISTRY.get_sample_value
    assert value("starfish_certificate_expiry_timestamp_seconds", {"use": "tls"}) == not_after(cert)
    assert value("starfish_certificate_expiry_timestamp_seconds", {"use": "ca"}) == not_after(tmp_path / "ca.pem")
    issue_cert(tmp_path, "party0", valid_days=200)  # renewal: the next scrape sees the new date
    assert value("starfish_certificate_expiry_timestamp_seconds", {"use": "tls"}) == not_after(cert)
    assert not_after(cert) > time.time() + 100 * 86400
    cert.unlink()
    assert math.isnan(value("starfish_certificate_expiry_timestamp_seconds", {"use": "tls"}))
    rules = {r["alert"]: r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]}
    assert "starfish_certificate_expiry_timestamp_seconds" in rules["StarfishCertificateExpiring"]["expr"]
