"""The job report page in a real browser: Debian's Chromium, headless, renders the page that
`starfish admin report JOB --html` writes for a real job (fixture `certified_job`).

Checked in the DOM after the page's script ran (`--dump-dom`): every section is there, every
chart is an SVG that the browser laid out with a non-zero size, and the certificate shows as
verified (and as NOT VERIFIED for a tampered one). The verdict at the top says in words that
the client was forgotten, with the job's filed, queued, started and finished times, the
replaced and unlearned models, both operators' erasure and signatures and the certificate
check (and says NOT PROVEN, without a green badge, for a tampered certificate). Every
technical term the page uses has a glossary entry and every in-page link resolves. No chart
text (legends included) lies outside its SVG: a copy of the page with a measuring script
compares each text's rendered box with its SVG's. A full-page screenshot is kept under
`test-artifacts/` and must not be blank. The page itself loads nothing: its links and
sources stay inside the file, and its Content-Security-Policy allows only its own inline
style and script.

Skipped, saying why, where no Chromium is installed (deploy/setup.sh installs Debian's
`chromium` when it runs as root).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest

from client_sdk.evidence import check_certificate
from harness.local import REPO_ROOT
from harness.report_page import render_page
from harness.report_page.markup import when

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
ARTIFACTS = REPO_ROOT / "test-artifacts"
SECTIONS = (
    "verdict",
    "summary",
    "parameters",
    "certificate",
    "rounds",
    "flags",
    "costs",
    "quality",
    "theorem1",
    "revealed",
    "erasure",
    "glossary",
)
CHARTS = ("selected-rounds", "step-seconds", "step-bytes")
#: technical words a reader may not know: wherever one appears on the page, the glossary explains it
TECHNICAL = (
    "SecMax",
    "SecRS",
    "SecUE",
    "SecTC",
    "SecMI",
    "ARP",
    "TER",
    "BA-ASR",
    "MIA-ASR",
    "cohort",
    "Theorem 1 inputs",
    "correction flag",
    "curvature bit",
    "dealer",
    "two-party computation",
    "share",
    "erasure receipt",
    "stored rounds",
    "unlearning round",
    "exact gradient",
)
#: forgetting-quality figures as the demo passes them (fractions per model)
QUALITY = {
    "before": {"ter": 0.08, "ba_asr": 0.95, "mia_asr": 0.61},
    "starfish": {"ter": 0.095, "ba_asr": 0.02, "mia_asr": 0.52},
    "retrain": {"ter": 0.077, "ba_asr": 0.01, "mia_asr": 0.5},
}
#: measures, in the browser, every chart text against its SVG's box (appended to a copy of the page)
MEASURE = """<script>
document.querySelectorAll("svg[data-chart]").forEach(function (svg) {
  var box = svg.getBoundingClientRect(), out = [];
  svg.querySelectorAll("text").forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.width <= 0 || r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
        r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5) { out.push(t.textContent); }
  });
  svg.setAttribute("data-texts", String(svg.querySelectorAll("text").length));
  svg.setAttribute("data-legends", String(svg.querySelectorAll("text.legend").length));
  svg.setAttribute("data-outside", out.join("|"));
});
</script>"""

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        BROWSER is None, reason="no Chromium installed (deploy/setup.sh installs Debian's chromium as root)"
    ),
]


def browser(page: Path, *args: str) -> subprocess.CompletedProcess:
    """Run headless Chromium on a local file with a fresh profile directory."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run(
            [BROWSER, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


BLOCKS = {"section", "h1", "h2", "h3", "p", "dt", "dd", "li", "th", "td", "tr", "figcaption", "summary", "pre"}


class Dom(HTMLParser):
    """The elements of a dumped DOM (tag name and attributes, in document order) and its
    visible text by enclosing section id (script and style contents left out; blocks
    separated by a space)."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, list[str]] = {}
        self._sections: list[str] = []
        self._hidden = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag == "section":
            self._sections.append(attributes.get("id", ""))
        self._hidden += tag in ("script", "style", "title")
        if tag in BLOCKS:
            self.handle_data(" ")

    def handle_endtag(self, tag):
        if tag in BLOCKS:
            self.handle_data(" ")
        if tag == "section" and self._sections:
            self._sections.pop()
        self._hidden -= tag in ("script", "style", "title")

    def handle_data(self, data):
        if not self._hidden:
            self.texts.setdefault(self._sections[-1] if self._sections else "", []).append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]

    def text(self, *sections: str) -> str:
        """The text of the given sections (all but the glossary and the raw JSON when none given)."""
        keys = sections or [k for k in self.texts if k not in ("glossary", "raw")]
        return " ".join(" ".join("".join(self.texts.get(k, [])).split()) for k in keys)


def _dump(page: Path) -> Dom:
    run = browser(page, "--dump-dom")
    assert run.returncode == 0 and "<html" in run.stdout, run.stderr[-2000:]
    return Dom(run.stdout)


def _measured(page: Path, tmp_path: Path) -> dict[str, dict[str, str]]:
    """Each chart's attributes after the measuring script ran on a copy of `page` (its
    Content-Security-Policy removed so the measuring script may run)."""
    source = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text())
    copy = tmp_path / f"measured-{page.name}"
    copy.write_text(source.replace("</body>", MEASURE + "</body>"))
    return {a["data-chart"]: a for a in _dump(copy).find("svg") if "data-chart" in a}


def _assert_nothing_clipped(page: Path, tmp_path: Path, legends: dict[str, int]) -> None:
    charts = _measured(page, tmp_path)
    for name, count in legends.items():
        assert int(charts[name]["data-legends"]) == count, f"chart {name}: legend entries missing"
    for name, attrs in charts.items():
        assert int(attrs["data-texts"]) > 0, name
        assert attrs["data-outside"] == "", f"chart {name}: text outside its SVG: {attrs['data-outside']}"


def _assert_verdict(dom: Dom, report: dict) -> None:
    """The verdict says in words: forgotten, who, when, which models, erased, signed, verified."""
    job = report["job"]
    badge = dom.find("p", **{"data-verdict": "forgotten"})
    assert badge and "good" in badge[0]["class"]
    text = dom.text("verdict")
    assert f"{job['targets'][0]} was forgotten: both operators erased its stored data" in text
    assert job["filed"] == job["queued"] <= job["dequeued"] <= job["started"] <= job["finished"]
    for label, moment in (("requested (filed)", "filed"), ("left the queue", "dequeued"), ("started", "started")):
        assert f"{label} {when(job[moment])}" in text, label
    assert f"finished {when(job['finished'])}" in text and "queued at once" in text
    assert (
        f"global model {job['base_round']} ({job['base_model_hash'][:12]}…) was replaced by the unlearned global "
        f"model {job['new_global_round']} ({job['model_hash'][:12]}…)"
    ) in text
    for party in (0, 1):
        assert f"party{party} deleted the shares of {job['targets'][0]} from" in text
    assert "was signed by party0 at" in text and ", party1 at" in text
    assert "It verifies against the CA certificate" in text
    assert "forgetting quality not measured for this job" in text


def _assert_glossary(dom: Dom, report: dict) -> None:
    """Every in-page link resolves; every term link leads to a glossary entry; every technical
    word, revealed kind and parameter the page shows is explained (glossary or table)."""
    ids = {a["id"] for _, a in dom.elements if a.get("id")}
    links = [a["href"][1:] for a in dom.find("a") if a.get("href", "").startswith("#")]
    assert links and not [x for x in links if x not in ids], "in-page links without a target"
    entries = {a["data-term"] for a in dom.find("dt") if "data-term" in a}
    terms = [a["href"][1:] for a in dom.find("a") if "term" in a.get("class", "").split()]
    assert terms and {t.removeprefix("term-") for t in terms} <= entries
    glossary = dom.text("glossary").lower()
    page = dom.text()
    used = [w for w in TECHNICAL if w.lower() in page.lower()]
    assert len(used) > 15, used
    assert not [w for w in used if w.lower() not in glossary], "technical words without a glossary entry"
    kinds = set(report["revealed"])
    assert kinds and kinds <= entries, kinds - entries
    assert {f"term-{k}" for k in kinds} <= set(terms), "a revealed kind is not linked to its entry"
    params = dom.text("parameters")
    assert "{" not in dom.text("summary", "parameters"), "raw parameter JSON above the bottom of the page"
    words = {None: "none", True: "yes", False: "no"}
    for name, value in report["params"].items():
        shown = words[value] if value is None or isinstance(value, bool) else value
        assert f"{name} {shown}" in params, name
    assert "no description" not in params


def test_the_report_page_renders_in_a_real_browser(stage2, certified_job, tmp_path):
    job_id, report, _ = certified_job
    page = tmp_path / "report.html"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "starfish_cli",
            "admin",
            "--dir",
            str(stage2.dep.root),
            "report",
            job_id,
            "--html",
            str(page),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert made.returncode == 0 and "certificate verified" in made.stdout, made.stderr
    source = page.read_text()
    assert "Content-Security-Policy" in source and "default-src 'none'" in source
    assert not re.findall(r'(?:src|href)="(?!#)', source), "the page must not load or link anything outside itself"
    assert "single-operator demo: dealer not independent; sessions served by dealer (" in source

    dom = _dump(page)
    assert dom.find("body", **{"data-laid-out": "yes"}), "the page's script did not run"
    _assert_verdict(dom, report)
    _assert_glossary(dom, report)
    _assert_nothing_clipped(page, tmp_path, {"step-bytes": 2})
    for ident in SECTIONS:
        assert dom.find("section", id=ident), f"section {ident} missing"
    charts = {a["data-chart"]: a for a in dom.find("svg") if "data-chart" in a}
    for name in CHARTS:
        assert name in charts, f"chart {name} missing"
    for name, attrs in charts.items():
        assert int(attrs["data-rendered-width"]) > 100 and int(attrs["data-rendered-height"]) > 10, name
    assert dom.find("p", **{"data-verification": "valid"})

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-page.png"
    shot.unlink(missing_ok=True)
    run = browser(page, f"--screenshot={shot}", "--window-size=1200,4200")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    colours = {tuple(p) for p in pixels[::7, ::7, :3].reshape(-1, 3).round(2).tolist()}
    assert len(colours) > 20, "the screenshot is (nearly) blank"


def test_a_tampered_certificate_shows_as_not_verified(stage2, certified_job, tmp_path):
    _, report, reply = certified_job
    doc = json.loads(reply.certificate_json)
    doc["statement"]["models"]["unlearned"]["hash"] = "0" * 64
    check = check_certificate(doc, [stage2.dep.ca_cert])
    page = tmp_path / "tampered.html"
    page.write_text(render_page(report, check))
    dom = _dump(page)
    assert dom.find("p", **{"data-verification": "refused"})
    assert not dom.find("p", **{"data-verification": "valid"})
    verdict = dom.find("p", **{"data-verdict": "not-proven"})
    assert verdict and "good" not in verdict[0]["class"] and not dom.find("p", **{"class": "badge good"})
    text = dom.text("verdict")
    target = report["job"]["targets"][0]
    assert f"this page does not prove that {target} was forgotten: the erasure certificate does NOT verify" in text
    assert text.startswith(f"Verdict NOT PROVEN The job for {target} finished, but")


def test_the_forgetting_quality_shows_in_the_verdict_and_its_legend_fits(stage2, certified_job, tmp_path):
    _, report, reply = certified_job
    check = check_certificate(reply.certificate_json, [stage2.dep.ca_cert])
    page = tmp_path / "quality.html"
    page.write_text(render_page(report, check, QUALITY))
    dom = _dump(page)
    assert dom.find("p", **{"data-verdict": "forgotten"})
    assert (
        "forgetting quality test error (TER) 9.5 % after unlearning, 7.7 % retrained without the client, "
        "8.0 % before; backdoor success (BA-ASR) 2.0 % after unlearning"
    ) in dom.text("verdict")
    _assert_nothing_clipped(page, tmp_path, {"step-bytes": 2, "quality": 3})
