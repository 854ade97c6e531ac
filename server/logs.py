"""Log set-up of a party process: text or JSON lines (`[observability] log_format`).

Every record carries the party's name and the request id it was logged under
(`server.request_context`). JSON lines hold: ``time`` (ISO 8601 UTC), ``level``,
``party``, ``logger``, ``request_id``, ``message`` and, for an exception, ``exception``.
The service logs client ids, rounds, hashes and counts — never shares, masks or
credentials (the integration tests read the logs to check the credentials are absent).
"""

from __future__ import annotations

import json
import logging
import sys

from proto.certificate import utc_iso
from server import request_context

TEXT_FORMAT = "%(asctime)s %(party)s %(name)s %(levelname)s [%(request_id)s] %(message)s"


class ContextFilter(logging.Filter):
    """Adds `party` and `request_id` to every record."""

    def __init__(self, party: str):
        super().__init__()
        self.party = party

    def filter(self, record: logging.LogRecord) -> bool:
        record.party = self.party
        record.request_id = request_context.current()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": utc_iso(record.created),
            "level": record.levelname,
            "party": getattr(record, "party", ""),
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(party: str, log_format: str, level: str = "INFO") -> None:
    """Send this process's logs to stderr in `log_format` ("text" or "json")."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter(party))
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
