"""The worker's side of its pipe to the party process: JSON lines, one object per line.

The worker's own stdout is pointed at stderr so no library print can corrupt the
protocol (`process.py` documents the messages). When stdin closes (the party died), the
worker exits at once with `EXIT_ORPHANED`.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import sys
import threading
from pathlib import Path
from typing import Any

EXIT_ORPHANED = 3
REQUEST_TIMEOUT_S = 60.0
log = logging.getLogger("server.workers.worker")


class ParentLink:
    """JSON lines to the party process (the original stdout) and replies from it (stdin).

    The worker's own stdout is pointed at stderr so no library print can corrupt the
    protocol. When stdin closes (the party died), the worker exits at once.
    """

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        self._lock = threading.Lock()
        self._replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self._next = 0
        threading.Thread(target=self._read, name="parent-link", daemon=True).start()

    def _read(self) -> None:
        for line in sys.stdin:
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(msg, dict):
                self._replies.put(msg)
        log.error("the party process closed the link; stopping")
        os._exit(EXIT_ORPHANED)

    def wait_spec(self) -> Path:
        """Block until the party hands over a session attempt; returns its spec file."""
        while True:
            msg = self._replies.get()
            if msg.get("kind") == "spec" and isinstance(msg.get("path"), str):
                return Path(msg["path"])

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self._out.write(json.dumps(message) + "\n")
            self._out.flush()

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its reply; raises if the party refused it."""
        self._next += 1
        self.send({**message, "id": self._next})
        while True:
            reply = self._replies.get(timeout=REQUEST_TIMEOUT_S)
            if reply.get("id") == self._next:
                break
        if not reply.get("ok", False):
            raise RuntimeError(f"party refused {message.get('kind')}: {reply.get('error', '')}")
        return reply
