"""Stage I cost: one FedAvg round over secret shares against a plain FedAvg round.

Setting (issue's acceptance): 20 clients, the paper's MNIST CNN size (582,026 float32
parameters), both run on this machine in the same benchmark run:

* starfish — party0 and party1 as real processes (TLS, durable store), clients as
  threads of this process using the SDK: fetch M_{i−1} from both parties (hash check),
  compute ‖g‖ and δ, share (g, ‖g‖, δ), upload to both; the parties agree, aggregate,
  exchange aggregate shares and commit M_i;
* unvalidated — the same deployment with `[validation] enabled = false`: no upload check
  (docs/PRIVACY.md, "Validated uploads"), so `figures.validation_overhead` is the validated
  round's median wall time over this one's;
* plain — `bench.stage1_plain`: one server process, same transport and durability,
  clients fetch the model and upload the float32 gradient in the clear.

The three arms run side by side and their rounds are interleaved (round r of each arm,
then r + 1), so a change of machine load affects all three alike; every ratio comes from
this one run. The order of the arms rotates from round to round, so each arm follows each
other arm equally often over the measured rounds: what one arm's processes still do after
its round ended (a commit, a write-back) does not always fall into the same other arm's
round.

Round wall time runs from the moment clients start (the round is open, the gradients are
ready: local training is the same in both and excluded) until M_i is committed. CPU
seconds per round (clients, parties/server, summed over processes) are reported too:
on a shared 2-core machine they are steadier than wall time. Bytes are
payload bytes (model, gradient/share data and headers; TLS and HTTP/2 framing excluded):
client downloads, client uploads, and the party-to-party aggregate exchange.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from bench.env import stamp, write_result
from harness.local import LocalDeployment
from mpc.ports import free_port
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from proto.wire import chunked_messages, collect_model, sha256_hex

NAME = "stage1"
PAPER_MODEL_PARAMS = 582_026
CLIENTS = 20
LR = 0.01
TARGET_OVERHEAD = 1.5
TARGET_VALIDATION_OVERHEAD = 1.25
MODEL_HEADER_BYTES = 160  #: a ModelHeader message (hash, name, sizes), rounded up


def _cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """User + system CPU seconds used so far by this process (the clients) and by the given
    server processes."""
    tick = os.sysconf("SC_CLK_TCK")
    servers = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        servers += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return sum(os.times()[:2]), servers


def _gradients(m: int, clients: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [(rng.normal(scale=1e-2, size=m)).astype(np.float32) for _ in range(clients)]


def _in_threads(fns) -> None:
    errors: list[BaseException] = []

    def wrap(fn):
        try:
            fn()
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(f,)) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


class _StarfishArm:
    """A local deployment (party0, party1, dealer) and its 20 SDK clients, one round at a time."""

    def __init__(self, root: Path, m: int, validation: dict) -> None:
        self.ids = [f"c{i:02d}" for i in range(CLIENTS)]
        self.m = m
        self.dep = LocalDeployment(
            root, clients=self.ids, rounds={"deadline_s": 600.0, "poll_s": 0.02}, validation=validation
        )

    def start(self) -> None:
        self.dep.start()
        self.admin = self.dep.admin()
        self.admin.start_training("paper-mnist-cnn", np.zeros(self.m, dtype=np.float32), LR)
        self.clients = [self.dep.client(c) for c in self.ids]
        for c in self.clients:
            c.register()
        self.grads = _gradients(self.m, CLIENTS)
        self.pids = [self.dep.procs[0].pid, self.dep.procs[1].pid]

    def round(self, r: int) -> dict[str, Any]:
        return _starfish_round(r, self.clients, self.admin, self.grads, self.pids, self.m)

    def stop(self, rows: list[dict[str, Any]]) -> None:
        """Record the share bytes each party stored per round, then stop the deployment."""
        for role in (0, 1):  # files; seeds live in the database
            stored = sum(f.stat().st_size for f in (self.dep.data_dir(role) / "shares").rglob("*.i64"))
            for row in rows:
                row[f"bytes_shares_stored_party{role}"] = stored // max(len(rows), 1)
        self.admin.close()
        for c in self.clients:
            c.close()
        self.dep.stop()


def _round_timing(r: int, wall_s: float, cpu0: tuple[float, float], cpu1: tuple[float, float]) -> dict:
    """Wall time and the CPU time (user + sys) of the processes sampled before and after a round."""
    return {
        "round": r,
        "wall_s": wall_s,
        "cpu_s": sum(cpu1) - sum(cpu0),
        "cpu_s_clients": cpu1[0] - cpu0[0],
        "cpu_s_parties": cpu1[1] - cpu0[1],
    }


def _starfish_round(r: int, clients: list, admin: Any, grads: list[np.ndarray], pids: list[int], m: int) -> dict:
    """Round r through the service: every client does what Client.run_round does, timed per step."""
    clients[0].wait_for_round(r - 1, timeout_s=60)
    sent = [0] * CLIENTS
    fetch_s = [0.0] * CLIENTS
    submit_s = [0.0] * CLIENTS
    cpu0 = _cpu_seconds(pids)
    start = time.perf_counter()

    def one(j: int) -> None:
        t0 = time.perf_counter()
        view = clients[j].wait_for_round(r - 1, timeout_s=60)
        model = clients[j].fetch_model(view.round - 1)
        t1 = time.perf_counter()
        sent[j] = clients[j].submit(view.round, grads[j], 100 + j, model_hash=model.hash).bytes_sent
        fetch_s[j], submit_s[j] = t1 - t0, time.perf_counter() - t1

    _in_threads([lambda j=j: one(j) for j in range(CLIENTS)])
    uploaded = time.perf_counter()
    while admin.status().latest_committed < r:
        time.sleep(0.02)
    end = time.perf_counter()
    cpu1 = _cpu_seconds(pids)
    summary = admin.status().rounds[r - 1]
    return {
        **_round_timing(r, end - start, cpu0, cpu1),
        "upload_phase_s": uploaded - start,
        "aggregate_phase_s": end - uploaded,
        "client_fetch_s_mean": float(np.mean(fetch_s)),
        "client_submit_s_mean": float(np.mean(submit_s)),
        # the model from party0, its header (hash) from party1
        "bytes_client_upload": int(sum(sent)),
        "bytes_client_download": CLIENTS * (4 * m + 2 * MODEL_HEADER_BYTES),
        "bytes_peer": int(summary.peer_bytes),
        "members": len(summary.members),
    }


def _plain_server(root: Path, port: int, m: int) -> subprocess.Popen:
    """Start the plain FedAvg server (`bench.stage1_plain`) with party0's certificate."""
    certs = root / "starfish" / "certs"
    args = ["--listen", f"127.0.0.1:{port}", "--cert", str(certs / "party0.pem"), "--key", str(certs / "party0.key")]
    args += ["--dir", str(root / "plain"), "--clients", str(CLIENTS), "--params", str(m), "--lr", str(LR)]
    return subprocess.Popen([sys.executable, "-m", "bench.stage1_plain", *args], stdout=subprocess.PIPE, text=True)


class _PlainArm:
    """The plain FedAvg server and its 20 clients (gRPC stubs), one round at a time."""

    def __init__(self, root: Path, m: int) -> None:
        self.root, self.m = root, m

    def start(self) -> None:
        port = free_port()
        self.proc = _plain_server(self.root, port, self.m)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"
        ca = (self.root / "starfish" / "certs" / "ca.pem").read_bytes()
        creds = grpc.ssl_channel_credentials(ca)
        opts = [("grpc.max_send_message_length", 4 * 1024 * 1024), ("grpc.max_receive_message_length", 4 * 1024 * 1024)]
        self.channels = [grpc.secure_channel(f"127.0.0.1:{port}", creds, options=opts) for _ in range(CLIENTS)]
        self.stubs = [client_pb2_grpc.ClientServiceStub(ch) for ch in self.channels]
        self.grads = _gradients(self.m, CLIENTS)

    def round(self, r: int) -> dict[str, Any]:
        return _plain_round(r, self.stubs, self.grads, self.proc.pid, self.m)

    def stop(self) -> None:
        for ch in getattr(self, "channels", []):
            ch.close()
        if getattr(self, "proc", None) is not None:
            self.proc.terminate()
            self.proc.wait(10)


def _plain_round(r: int, stubs: list, grads: list[np.ndarray], pid: int, m: int) -> dict:
    """Round r of plain FedAvg: every client fetches the model and uploads its gradient in the clear."""
    sent = [0] * CLIENTS
    cpu0 = _cpu_seconds([pid])
    start = time.perf_counter()

    def one(j: int) -> None:
        md = (("x-starfish-client", f"c{j:02d}"),)
        collect_model(stubs[j].GetModel(client_pb2.GetModelRequest(latest=True), metadata=md))
        data = grads[j].astype("<f4").tobytes()
        header = common_pb2.UploadHeader(
            round=r, n_samples=100 + j, shape=[m], dtype="float32", content_sha256=sha256_hex(data)
        )
        stubs[j].UploadShares(chunked_messages(common_pb2.UploadChunk, header, data, 1 << 20), metadata=md)
        sent[j] = len(data) + 64

    _in_threads([lambda j=j: one(j) for j in range(CLIENTS)])
    end = time.perf_counter()
    cpu1 = _cpu_seconds([pid])
    return {
        **_round_timing(r, end - start, cpu0, cpu1),
        "bytes_client_upload": int(sum(sent)),
        "bytes_client_download": CLIENTS * (4 * m + MODEL_HEADER_BYTES),
        "bytes_peer": 0,
        "bytes_gradients_stored": CLIENTS * 4 * m,
    }


def _interleaved(root: Path, m: int, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """Rounds 1..`rounds` of the three arms, interleaved (module doc)."""
    arms = {
        "starfish": _StarfishArm(root / "starfish", m, {"enabled": True}),
        "unvalidated": _StarfishArm(root / "unvalidated", m, {"enabled": False}),
    }
    plain = _PlainArm(root, m)
    rows: dict[str, list[dict[str, Any]]] = {"starfish": [], "unvalidated": [], "plain": []}
    try:
        for arm in arms.values():
            arm.start()
        plain.start()  # uses the first deployment's certificates
        order = [*arms.items(), ("plain", plain)]
        for r in range(1, rounds + 1):
            turn = (r - 1) % len(order)
            for name, arm in order[turn:] + order[:turn]:
                rows[name].append(arm.round(r))
        for name, arm in arms.items():
            arm.stop(rows[name])
    finally:
        plain.stop()
        for arm in arms.values():
            arm.dep.stop()
    return rows


def _spread(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    """min, median, max of `key` over the rounds after the warm-up round."""
    values = [row[key] for row in rows[1:]]
    return {"min": float(np.min(values)), "median": float(np.median(values)), "max": float(np.max(values))}


def _round_bytes(rows: list[dict[str, Any]]) -> float:
    keys = ("bytes_client_upload", "bytes_client_download", "bytes_peer")
    return sum(_spread(rows, k)["median"] for k in keys if k in rows[0])


def run(quick: bool = False) -> dict:
    """Measure `rounds` rounds of each arm; the first round of each is a warm-up and is
    reported but excluded from the medians."""
    m = PAPER_MODEL_PARAMS // 10 if quick else PAPER_MODEL_PARAMS
    rounds = 4 if quick else 7  #: the first is a warm-up; 6 measured rounds are two full rotations
    meta = stamp({"clients": CLIENTS, "params": m, "rounds": rounds, "quick": quick, "transport": "gRPC+TLS loopback"})
    with tempfile.TemporaryDirectory(prefix="stage1-bench-") as tmp:
        rows = _interleaved(Path(tmp), m, rounds)
    s, u, p = rows["starfish"], rows["unvalidated"], rows["plain"]
    wall = {name: _spread(rows[name], "wall_s") for name in rows}
    cpu = {name: _spread(rows[name], "cpu_s") for name in rows}
    s_bytes, u_bytes, p_bytes = _round_bytes(s), _round_bytes(u), _round_bytes(p)
    figures = {
        "starfish_rounds": s,
        "unvalidated_rounds": u,
        "plain_rounds": p,
        "wall_s": wall,
        "cpu_s": cpu,
        "starfish_round_s": wall["starfish"]["median"],
        "unvalidated_round_s": wall["unvalidated"]["median"],
        "plain_round_s": wall["plain"]["median"],
        "time_overhead": wall["starfish"]["median"] / wall["plain"]["median"],
        "validation_overhead": wall["starfish"]["median"] / wall["unvalidated"]["median"],
        "unvalidated_time_overhead": wall["unvalidated"]["median"] / wall["plain"]["median"],
        "starfish_round_cpu_s": cpu["starfish"]["median"],
        "unvalidated_round_cpu_s": cpu["unvalidated"]["median"],
        "plain_round_cpu_s": cpu["plain"]["median"],
        "cpu_overhead": cpu["starfish"]["median"] / cpu["plain"]["median"],
        "validation_cpu_overhead": cpu["starfish"]["median"] / cpu["unvalidated"]["median"],
        "starfish_round_bytes": s_bytes,
        "unvalidated_round_bytes": u_bytes,
        "plain_round_bytes": p_bytes,
        "bytes_overhead": s_bytes / p_bytes,
        "validation_bytes_overhead": s_bytes / u_bytes,
        "target_time_overhead": TARGET_OVERHEAD,
        "target_validation_overhead": TARGET_VALIDATION_OVERHEAD,
        "meets_target": wall["starfish"]["median"] / wall["plain"]["median"] <= TARGET_OVERHEAD,
        "meets_validation_target": wall["starfish"]["median"] / wall["unvalidated"]["median"]
        <= TARGET_VALIDATION_OVERHEAD,
    }
    write_result(NAME, meta, figures)
    return figures


if __name__ == "__main__":
    import json

    print(
        json.dumps({k: v for k, v in run(quick="--quick" in sys.argv).items() if not k.endswith("_rounds")}, indent=1)
    )
