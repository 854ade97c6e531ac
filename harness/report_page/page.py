"""The job report as one self-contained HTML page.

No external asset: styles and the one small script are inline, charts are inline SVG
(`harness.report_page.charts`), and a Content-Security-Policy allows nothing but those
exact inline blocks (by hash), so the page loads nothing from anywhere even if a value
in the report were hostile (every value is escaped as well).

The script only records each chart's rendered size on the chart element
(`data-rendered-width/height`) and marks the body as laid out, so a headless browser's
DOM dump shows the charts really rendered.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from html import escape
from typing import Any

from client_sdk.evidence import CertificateCheck
from harness.report_page import evidence_sections, sections
from harness.report_page.evaluation import federated_evaluation
from harness.report_page.glossary import glossary
from harness.report_page.markup import section
from harness.report_page.parameters import parameters
from harness.report_page.verdict import verdict

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2430;margin:0;background:#f5f7fa}
main{max-width:960px;margin:0 auto;padding:24px}
header{background:#1d2f4a;color:#fff;padding:20px 24px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;opacity:.85}
section{background:#fff;border:1px solid #dde3ea;border-radius:6px;padding:16px 20px;margin:0 0 18px}
h2{font-size:17px;margin:0 0 10px}h3{font-size:14px;margin:14px 0 4px}
dl{display:grid;grid-template-columns:max-content 1fr;gap:4px 16px;margin:0}dt{color:#5a6675}
dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;width:100%;margin:8px 0;font-size:13px}
th,td{border-bottom:1px solid #e4e8ee;padding:4px 8px;text-align:left;vertical-align:top}
table.num td+td{text-align:right}figure{margin:8px 0 14px;overflow-x:auto}
figcaption{color:#5a6675;font-size:12px;margin-top:2px}.note{color:#3d4856}
.badge{display:inline-block;font-weight:700;padding:6px 12px;border-radius:4px;margin:0 0 10px}
.good{background:#dff3e4;color:#1c6b34}.bad{background:#fbe3e3;color:#8f1f1f}
svg text.lbl{font-size:12px;fill:#1d2430}svg text.tick{font-size:10px;fill:#5a6675}
pre{background:#f5f7fa;padding:8px;overflow:auto;max-height:420px;font-size:11px}
nav a{color:#cfe0ff;margin-right:12px;font-size:13px}
a.term{color:inherit;text-decoration:underline dotted #5a6675;text-underline-offset:2px}
p.verdict{font-size:16px;margin:0 0 12px}dl.glossary dt{font-weight:600;color:#1d2430;margin-top:6px}
"""

SCRIPT = """
document.querySelectorAll("svg[data-chart]").forEach(function (svg) {
  var box = svg.getBoundingClientRect();
  svg.setAttribute("data-rendered-width", String(Math.round(box.width)));
  svg.setAttribute("data-rendered-height", String(Math.round(box.height)));
});
document.body.setAttribute("data-laid-out", "yes");
"""

NAV = (
    ("verdict", "Verdict"),
    ("evaluation", "Evaluation"),
    ("summary", "Summary"),
    ("parameters", "Parameters"),
    ("certificate", "Certificate"),
    ("rounds", "Rounds"),
    ("flags", "Checks"),
    ("costs", "Costs"),
    ("quality", "Quality"),
    ("theorem1", "Theorem 1"),
    ("revealed", "Revealed"),
    ("erasure", "Erasure"),
    ("glossary", "Glossary"),
)


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def render_page(
    report: Mapping[str, Any],
    check: CertificateCheck | None = None,
    quality: Mapping[str, Mapping[str, float]] | None = None,
    certificate_file: str = "certificate.json",
) -> str:
    """The HTML page of a job report; `check` is the certificate's verification by the
    renderer (None: no certificate), `quality` optional TER/BA-ASR/MIA-ASR per model.
    The verdict comes first, the glossary and the raw JSON last."""
    job = report.get("job", {})
    title = f"Unlearning job {job.get('job_id', '?')}"
    csp = f"default-src 'none'; style-src {_sha256(STYLE)}; script-src {_sha256(SCRIPT)}"
    body = [
        verdict(report, check, quality),
        federated_evaluation(report),
        sections.summary(report),
        parameters(report),
        evidence_sections.certificate(check, report.get("certificate"), certificate_file, report),
        sections.rounds(report),
        sections.flags(report),
        sections.costs(report),
        sections.quality(quality),
        sections.theorem1(report),
        sections.revealed(report),
        evidence_sections.erasure(report),
        glossary(),
        section(
            "raw",
            "The report as JSON",
            "<details><summary>show</summary>"
            f"<pre>{escape(json.dumps(report, indent=1, sort_keys=True))}</pre></details>",
        ),
    ]
    nav = "".join(f'<a href="#{ident}">{escape(label)}</a>' for ident, label in NAV)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{escape(csp, quote=False)}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<header><h1>{escape(title)}</h1><p>Forgetting {escape(', '.join(job.get('targets', [])))} "
        f"— report of the Starfish federated-unlearning service</p><nav>{nav}</nav></header>"
        f"<main>{''.join(body)}</main><script>{SCRIPT}</script></body></html>\n"
    )
