"""A process hosting many soak clients (`bench.soak`): real SDK clients as threads, killed and
restarted as a whole by the soak harness.

    python -m bench.soak_client ROOT ACKLOG M ROUNDS WATCHERS CLIENT [CLIENT ...]

One watcher thread polls the round state; each client thread submits its deterministic
gradient (`gradient(client, round, m)`) for every open round it has not yet submitted to,
through the SDK (outbox under ROOT/outbox/<client>, so a restarted process resends the same
sharings). Each upload both parties acknowledged is appended to ACKLOG as one JSON line,
flushed and fsynced before the next. The first WATCHERS clients also keep WatchTasks streams
open on both parties (`serve_tasks`). The process ends when round ROUNDS is committed. A client
named in the environment variable SOAK_LEAVERS (JSON: client → last round) takes part up to
that round and then leaves (the soak then has it forgotten by an unlearning job).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np

from client_sdk import Client, PartyUnreachableError, RoundClosedError, StarfishError
from client_sdk.client import RoundView
from harness.local import LocalDeployment

POLL_S = 0.2


def gradient(client: str, round_index: int, m: int) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(f"{client}/{round_index}".encode())).normal(scale=0.5, size=m)


def samples(client: str) -> int:
    return 5 + zlib.crc32(client.encode()) % 20


class AckLog:
    """Append-only JSON lines, durable before `write` returns (an ack is never claimed twice over)."""

    def __init__(self, path: Path):
        self._fh = open(path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        with self._lock:
            self._fh.write(json.dumps(record) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())


class Watcher:
    """The newest round view of this process, polled by one SDK client."""

    def __init__(self, sdk: Client):
        self.sdk = sdk
        self.view: RoundView | None = None
        self.changed = threading.Condition()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                view = self.sdk.round_state()
            except StarfishError:
                time.sleep(POLL_S)
                continue
            with self.changed:
                self.view = view
                self.changed.notify_all()
            time.sleep(POLL_S)

    def next_round(self, after: int, rounds: int) -> RoundView | None:
        """Wait until a round > `after` is open (the view), or None once round `rounds` committed."""
        with self.changed:
            while True:
                v = self.view
                if v is not None and v.latest_committed >= rounds:
                    return None
                if v is not None and v.is_open and v.round > after:
                    return v
                self.changed.wait(1.0)


def client_loop(sdk: Client, watcher: Watcher, log: AckLog, m: int, rounds: int, leave: int) -> None:
    last = 0
    while True:
        view = watcher.next_round(last, rounds)
        if view is None or view.round > leave:
            return
        r = view.round
        try:
            receipt = sdk.submit(r, gradient(sdk.client_id, r, m), samples(sdk.client_id))
        except RoundClosedError as exc:
            log.write({"client": sdk.client_id, "round": r, "missed": exc.status.outcome if exc.status else ""})
        except (PartyUnreachableError, StarfishError) as exc:
            log.write({"client": sdk.client_id, "round": r, "error": f"{type(exc).__name__}: {exc}"})
            time.sleep(POLL_S)
            continue
        else:
            log.write(
                {
                    "client": sdk.client_id,
                    "round": r,
                    "content_sha256": list(receipt.content_sha256),
                    "binding_sha256": receipt.binding_sha256,
                    "resumed": receipt.resumed,
                }
            )
        last = r


def main(argv: list[str]) -> int:
    root, acklog, m, rounds, watchers = Path(argv[0]), Path(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
    clients = argv[5:]
    dep = LocalDeployment(root)
    log = AckLog(acklog)
    stop = threading.Event()
    watcher = Watcher(dep.client(clients[0], retries=1, outbox_dir=root / "outbox" / "_watchers" / clients[0]))
    threading.Thread(target=watcher.run, args=(stop,), daemon=True).start()
    sdks = [dep.client(c) for c in clients]
    for sdk in sdks[:watchers]:
        threading.Thread(target=sdk.serve_tasks, args=(lambda params, task: (params * 0, 1), stop), daemon=True).start()
    leavers = json.loads(os.environ.get("SOAK_LEAVERS", "{}"))
    threads = [
        threading.Thread(target=client_loop, args=(s, watcher, log, m, rounds, leavers.get(s.client_id, rounds)))
        for s in sdks
    ]
    for t in threads:
        t.start()
    print("ready", flush=True)
    for t in threads:
        t.join()
    stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
