"""The job report page's verdict, parameter table, glossary and chart layout, rendered from a
report shaped like `server.jobs.job_report.build_report`'s and a certificate signed with real
keys (`evidence_fixtures`). The browser test (tests/integration/test_report_page_browser.py)
renders a real job's page in Chromium.

The verdict is green ("forgotten") only for a succeeded job with both operators' receipts and
a certificate that verifies and names this job; each other case says why in words.
"""

from __future__ import annotations

import copy
import dataclasses
import re

import pytest

from client_sdk.evidence import check_certificate
from harness.report_page import charts, render_page
from harness.report_page.glossary import TERMS
from harness.report_page.parameters import MEANINGS
from server.jobs.cancellation import cancellation_report
from server.jobs.job_report import KIND_COHORTS
from server.jobs.jobstore import JobRecord
from unlearning.baselines.random_selection import RandomSelectionParams
from unlearning.starfish.params import StarfishParams

from helpers.evidence_fixtures import Keys, certificate

FILED = 1_800_000_000.0


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    return Keys.make(tmp_path_factory.mktemp("keys"))


def receipt(party: int) -> dict:
    return {
        "party": party,
        "client": "c2",
        "rounds": [1, 2, 3],
        "files_deleted": 3 - party,
        "bytes_deleted": 1536,
        "rows_deleted": 3,
        "erased_at": FILED + 400,
        "content_sha256": ["a" * 64],
    }


def report() -> dict:
    """A succeeded job that forgot c2, matching `evidence_fixtures.statement()`."""
    return {
        "job": {
            "job_id": "j0123456789ab",
            "targets": ["c2"],
            "strategy": "starfish",
            "state": "succeeded",
            "parameters": {"beta": 0.25, "min_cohort": 3},
            "base_round": 3,
            "base_model_hash": "1" * 64,
            "new_global_round": 4,
            "model_hash": "2" * 64,
            "session_attempts": 1,
            "created": FILED,
            "filed": FILED,
            "queued": FILED,
            "dequeued": FILED + 2,
            "started": FILED + 302,
            "finished": FILED + 390,
            "seconds": 88.0,
        },
        "params": {**StarfishParams(beta=0.25).as_dict},
        "stored_rounds": 3,
        "selection": {"method": "method1", "selected_rounds": [1, 3]},
        "revealed": {k: {"count": 1, "cohort": 1, "epsilon": None, "why": "t"} for k in ("selected_rounds",)},
        "erasure": {"c2": [receipt(0), receipt(1)]},
        "certificate": {"status": "signed", "signers": [{"signer": "party0", "signed_at": "x"}]},
    }


def verdict_of(page: str) -> tuple[str, str]:
    """The verdict's kind and the verdict section as text."""
    kind = re.search(r'data-verdict="([a-z-]+)"', page)
    section = re.search(r'<section id="verdict">(.*?)</section>', page, re.S)
    assert kind and section
    return kind.group(1), " ".join(re.sub(r"<[^>]+>", " ", section.group(1)).split())


def test_a_proven_job_is_forgotten_with_its_times_models_and_receipts(keys):
    check = check_certificate(certificate(keys), [keys.ca])
    page = render_page(report(), check)
    kind, text = verdict_of(page)
    assert kind == "forgotten" and 'class="badge good" data-verdict="forgotten"' in page
    assert "c2 was forgotten: both operators erased its stored data and signed the erasure certificate" in text
    assert "requested (filed) 2027-01-15 08:00:00 UTC; queued at once" in text
    assert "left the queue 2027-01-15 08:00:02 UTC, 2.0 s after filing" in text
    assert "started 2027-01-15 08:05:02 UTC, 5 min 0 s later (waiting for the open training round to end)" in text
    assert "the unlearning took 1 min 28 s; 6 min 30 s from request to finish" in text
    assert "global model 3 (111111111111…) was replaced by the unlearned global model 4 (222222222222…)" in text
    assert "party0 deleted the shares of c2 from 3 round(s): 3 file(s)" in text
    assert "party1 deleted the shares of c2 from 3 round(s): 2 file(s)" in text
    assert "It verifies against the CA certificate" in text and "not measured for this job" in text


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda r: r["erasure"]["c2"].pop(), "no erasure receipt of c2 on party1"),
        (lambda r: r["job"].update(model_hash="3" * 64), "the certificate names unlearned model 2222"),
        (lambda r: r["job"].update(job_id="jffffffffffff"), "the certificate names job j0123456789ab"),
    ],
)
def test_a_job_without_proof_is_not_proven_and_says_why(keys, change, expected):
    rep = report()
    change(rep)
    page = render_page(rep, check_certificate(certificate(keys), [keys.ca]))
    kind, text = verdict_of(page)
    assert kind == "not-proven" and 'class="badge bad" data-verdict="not-proven"' in page
    assert "this page does not prove that c2 was forgotten" in text and expected in text


def test_an_unverified_or_absent_certificate_is_not_proven(keys):
    doc = certificate(keys)
    doc["statement"]["erasure"]["c2"]["receipts"]["party1"]["files_deleted"] = 9
    page = render_page(report(), check_certificate(doc, [keys.ca]))
    kind, text = verdict_of(page)
    assert kind == "not-proven" and "the erasure certificate does NOT verify" in text and "badge good" not in page
    page = render_page(report(), None)
    kind, text = verdict_of(page)
    assert kind == "not-proven" and "no erasure certificate was checked for this page" in text
    assert "badge good" not in page


def test_a_cancelled_job_is_not_forgotten():
    fields = {f.name: f.default for f in dataclasses.fields(JobRecord)}
    fields.update(job_id="j0123456789ab", seq=1, targets=("c2",), strategy="starfish", parameters={})
    fields.update(state="cancelled", step="starting", unlearning_round=0, total_rounds=0, bytes=0, base_round=3)
    fields.update(base_model_hash="1" * 64, attempts=0, rendezvous="", model_hash="", error="", created=FILED)
    job = JobRecord(**{**fields, "started": None, "finished": None})
    page = render_page(cancellation_report(job, FILED + 60), None)
    kind, text = verdict_of(page)
    assert kind == "not-forgotten" and "badge good" not in page
    assert "c2 was NOT forgotten: the job was cancelled by the admin before it finished; nothing was erased" in text
    assert "started never" in text


def test_every_value_is_escaped():
    rep = report()
    rep["job"]["targets"] = ['<img src=x onerror="alert(1)">']
    rep["params"]["<b>odd</b>"] = "<script>alert(2)</script>"
    page = render_page(rep, None)
    assert "<img src=x" not in page and "<script>alert" not in page and "<b>odd" not in page
    assert "&lt;img src=x" in page


def test_the_parameters_are_a_table_and_every_parameter_has_a_meaning():
    page = render_page(report(), None)
    params = re.search(r'<section id="parameters">(.*?)</section>', page, re.S)
    assert params and "<td>beta</td><td>0.25</td><td>the job</td>" in params.group(1)
    assert "<td>sigma</td><td>1.0</td><td>default</td>" in params.group(1)
    summary = re.search(r'<section id="summary">(.*?)</section>', page, re.S)
    assert summary and "{" not in summary.group(1)
    names = {f.name for f in dataclasses.fields(RandomSelectionParams)}
    assert names <= set(MEANINGS), names - set(MEANINGS)


def test_every_revealed_kind_and_term_link_has_a_glossary_entry():
    kinds = {*KIND_COHORTS, "aggregate_gradients", "stage1_models", "unlearned_model"}
    assert kinds <= set(TERMS), kinds - set(TERMS)
    rep = report()
    rep["revealed"] = {k: {"count": 1, "cohort": 1, "epsilon": None, "why": "t"} for k in kinds}
    page = render_page(rep, None)
    anchors = set(re.findall(r'id="([^"]+)"', page))
    links = set(re.findall(r'href="#([^"]+)"', page))
    assert {f"term-{k}" for k in kinds} <= links and links <= anchors, links - anchors


LEGENDS = (
    ("a", "b"),
    ("before unlearning", "after unlearning", "retrained without target"),
    ("an uncommonly long series name " * 3, "W" * 40),
)


@pytest.mark.parametrize("names", LEGENDS)
def test_legend_entries_stay_inside_the_chart(names):
    series = [charts.Series(n, [1.0, 2.0], charts.PALETTE[i]) for i, n in enumerate(names)]
    svg = charts.hbar_chart("c", ["threshold determination (SecMax)", "x"], series, str, stacked=False)
    width, height = (float(v) for v in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
    legend = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" text-anchor="start" class="lbl legend">([^<]+)</text>', svg)
    assert len(legend) == len(names)
    for x, y, text in legend:
        assert float(x) + charts.text_width(text) <= width and 0 < float(y) <= height, text
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="end" class="lbl">([^<]+)</text>', svg)
    assert all(float(x) - charts.text_width(t) >= 0 for x, t in labels)


def test_a_report_without_the_new_times_still_renders():
    rep = copy.deepcopy(report())
    for key in ("filed", "queued", "dequeued", "state"):
        rep["job"].pop(key)
    kind, text = verdict_of(render_page(rep, None))
    assert kind == "not-proven" and "requested (filed) 2027-01-15 08:00:00 UTC" in text
    assert "5 min 2 s later (in the queue and for the open round)" in text
