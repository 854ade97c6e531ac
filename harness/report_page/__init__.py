"""The job report page: one self-contained HTML file (`render_page`)."""

from harness.report_page.page import render_page

__all__ = ["render_page"]
