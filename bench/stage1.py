"""Stage I cost: one FedAvg round over secret shares against a plain FedAvg round.

Setting (issue's acceptance): 20 clients, the paper's MNIST CNN size (582,026 float32
parameters), both run on this machine in the same benchmark run:

* starfish — party0 and party1 as real processes (TLS, durable store), clients as
  threads of this process using the SDK: fetch M_{i−1} from both parties (hash check),
  compute ‖g‖ and δ, share (g, ‖g‖, δ), upload to both; the parties agree, aggregate,
  exchange aggregate shares and commit M_i;
* plain — `bench.stage1_plain`: one server process, same transport and durability,
  clients fetch the model and upload the float32 gradient in the clear.

Round wall time runs from the moment clients start (the round is open, the gradients are
ready: local training is the same in both and excluded) until M_i is committed. Bytes are
payload bytes (model, gradient/share data and headers; TLS and HTTP/2 framing excluded):
client downloads, client uploads, and the party-to-party aggregate exchange.
"""
from __future__ import annotations

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
from client_sdk.wire import chunks, collect_model, sha256_hex
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from server.local import LocalDeployment, free_port

NAME = "stage1"
PAPER_MODEL_PARAMS = 582_026
CLIENTS = 20
LR = 0.01
TARGET_OVERHEAD = 1.5
MODEL_HEADER_BYTES = 160  #: a ModelHeader message (hash, name, sizes), rounded up


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


def _starfish_rounds(root: Path, m: int, rounds: int) -> list[dict[str, Any]]:
    ids = [f"c{i:02d}" for i in range(CLIENTS)]
    dep = LocalDeployment(root / "starfish", clients=ids, rounds={"deadline_s": 600.0, "poll_s": 0.01})
    dep.start()
    try:
        admin = dep.admin()
        admin.start_training("paper-mnist-cnn", np.zeros(m, dtype=np.float32), LR)
        clients = [dep.client(c) for c in ids]
        for c in clients:
            c.register()
        grads = _gradients(m, CLIENTS)
        out = []
        for r in range(1, rounds + 1):
            clients[0].wait_for_round(r - 1, timeout_s=60)
            sent = [0] * CLIENTS
            fetch_s = [0.0] * CLIENTS
            submit_s = [0.0] * CLIENTS
            start = time.perf_counter()

            def one(j: int) -> None:
                t0 = time.perf_counter()
                model = clients[j].fetch_model(r - 1)
                t1 = time.perf_counter()
                sent[j] = clients[j].submit(r, grads[j], 100 + j, model_hash=model.hash).bytes_sent
                fetch_s[j], submit_s[j] = t1 - t0, time.perf_counter() - t1
            _in_threads([lambda j=j: one(j) for j in range(CLIENTS)])
            uploaded = time.perf_counter()
            while admin.status().latest_committed < r:
                time.sleep(0.005)
            end = time.perf_counter()
            summary = admin.status().rounds[r - 1]
            out.append({
                "round": r, "wall_s": end - start, "upload_phase_s": uploaded - start, "aggregate_phase_s": end - uploaded,
                "client_fetch_s_mean": float(np.mean(fetch_s)), "client_submit_s_mean": float(np.mean(submit_s)),
                # the model from party0, its header (hash) from party1
                "bytes_client_upload": int(sum(sent)), "bytes_client_download": CLIENTS * (4 * m + 2 * MODEL_HEADER_BYTES),
                "bytes_peer": int(summary.peer_bytes), "members": len(summary.members),
            })
        admin.close()
        for c in clients:
            c.close()
        return out
    finally:
        dep.stop()


def _plain_rounds(root: Path, m: int, rounds: int) -> list[dict[str, Any]]:
    certs = root / "starfish" / "certs"
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.stage1_plain", "--listen", f"127.0.0.1:{port}",
                             "--cert", str(certs / "party0.pem"), "--key", str(certs / "party0.key"),
                             "--dir", str(root / "plain"), "--clients", str(CLIENTS), "--params", str(m), "--lr", str(LR)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        creds = grpc.ssl_channel_credentials((certs / "ca.pem").read_bytes())
        opts = [("grpc.max_send_message_length", 4 * 1024 * 1024), ("grpc.max_receive_message_length", 4 * 1024 * 1024)]
        channels = [grpc.secure_channel(f"127.0.0.1:{port}", creds, options=opts) for _ in range(CLIENTS)]
        stubs = [client_pb2_grpc.ClientServiceStub(ch) for ch in channels]
        grads = _gradients(m, CLIENTS)
        out = []
        for r in range(1, rounds + 1):
            sent = [0] * CLIENTS
            start = time.perf_counter()

            def one(j: int) -> None:
                md = (("x-starfish-client", f"c{j:02d}"),)
                collect_model(stubs[j].GetModel(client_pb2.GetModelRequest(latest=True), metadata=md))
                data = grads[j].astype("<f4").tobytes()
                header = common_pb2.UploadHeader(round=r, n_samples=100 + j, shape=[m], dtype="float32",
                                                 content_sha256=sha256_hex(data))
                msgs = [common_pb2.UploadChunk(header=header)] + [common_pb2.UploadChunk(data=p) for p in chunks(data, 1 << 20)]
                stubs[j].UploadShares(iter(msgs), metadata=md)
                sent[j] = len(data) + 64
            _in_threads([lambda j=j: one(j) for j in range(CLIENTS)])
            end = time.perf_counter()
            out.append({"round": r, "wall_s": end - start, "bytes_client_upload": int(sum(sent)),
                        "bytes_client_download": CLIENTS * (4 * m + MODEL_HEADER_BYTES), "bytes_peer": 0})
        for ch in channels:
            ch.close()
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def run(quick: bool = False) -> dict:
    """Measure `rounds` Starfish and plain rounds; the first round of each is a warm-up and
    is reported but excluded from the medians."""
    m = PAPER_MODEL_PARAMS // 10 if quick else PAPER_MODEL_PARAMS
    rounds = 2 if quick else 4
    meta = stamp({"clients": CLIENTS, "params": m, "rounds": rounds, "quick": quick, "transport": "gRPC+TLS loopback"})
    with tempfile.TemporaryDirectory(prefix="stage1-bench-") as tmp:
        root = Path(tmp)
        starfish = _starfish_rounds(root, m, rounds)
        plain = _plain_rounds(root, m, rounds)

    def median(rows, key):
        return float(np.median([row[key] for row in rows[1:]]))
    s_wall, p_wall = median(starfish, "wall_s"), median(plain, "wall_s")
    s_bytes = median(starfish, "bytes_client_upload") + median(starfish, "bytes_client_download") + median(starfish, "bytes_peer")
    p_bytes = median(plain, "bytes_client_upload") + median(plain, "bytes_client_download")
    figures = {
        "starfish_rounds": starfish, "plain_rounds": plain,
        "starfish_round_s": s_wall, "plain_round_s": p_wall, "time_overhead": s_wall / p_wall,
        "starfish_round_bytes": s_bytes, "plain_round_bytes": p_bytes, "bytes_overhead": s_bytes / p_bytes,
        "target_time_overhead": TARGET_OVERHEAD, "meets_target": s_wall / p_wall <= TARGET_OVERHEAD,
    }
    write_result(NAME, meta, figures)
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps({k: v for k, v in run(quick="--quick" in sys.argv).items() if not k.endswith("_rounds")}, indent=1))
