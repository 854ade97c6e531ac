"""The baseline of the Stage I benchmark: a plain FedAvg server without secret sharing.

One process, same transport as the parties (gRPC over TLS, same message limits and
chunking): clients fetch the model (float32) and upload their float32 gradient; the
server writes each gradient durably (temp file, fsync, rename — as the parties do with
shares) and, when the last of `--clients` uploads arrives, averages them with the FedAvg
weights, stores the new model durably and only then acknowledges that upload.

`python -m bench.stage1_plain --listen A --cert C --key K --dir D --clients N --params M --lr LR`
"""

from __future__ import annotations

import argparse
import signal
import threading
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

from mpc.durable import atomic_write
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from proto.wire import model_hash, model_messages, sha256_hex
from server.grpc_tls import channel_options

CHUNK_BYTES = 1024 * 1024
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


class PlainFedAvg(client_pb2_grpc.ClientServiceServicer):
    def __init__(self, data_dir: Path, clients: int, params: int, lr: float):
        self.dir = data_dir
        self.clients = clients
        self.lr = lr
        self.model = np.zeros(params, dtype=np.float32)
        self.round = 0
        self.pending: dict[str, tuple[np.ndarray, int]] = {}
        self.lock = threading.Lock()

    def GetModel(self, request, context):
        with self.lock:
            params, index = self.model, self.round
        header = common_pb2.ModelHeader(
            round=index, arch="plain", num_params=params.size, model_hash=model_hash("plain", params), lr=self.lr
        )
        yield from model_messages(header, params, CHUNK_BYTES)

    def UploadShares(self, request_iterator, context):
        it = iter(request_iterator)
        header = next(it).header
        data = b"".join(m.data for m in it)
        if header.dtype != "float32" or len(data) != 4 * self.model.size or sha256_hex(data) != header.content_sha256:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad gradient upload")
        client = dict(context.invocation_metadata()).get("x-starfish-client", "?")
        atomic_write(self.dir / f"r{header.round:04d}-{client}.f32", data)
        with self.lock:
            self.pending[client] = (np.frombuffer(data, dtype="<f4"), int(header.n_samples))
            if len(self.pending) == self.clients:
                total = sum(n for _, n in self.pending.values())
                agg = sum(n * g.astype(np.float64) for g, n in self.pending.values()) / total
                self.model = (self.model - self.lr * agg).astype(np.float32)
                atomic_write(self.dir / f"model-{self.round + 1:04d}.f32", self.model.tobytes())
                self.round += 1
                self.pending.clear()
        return client_pb2.UploadAck(client_id=client, round=header.round)


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("--listen", "--cert", "--key", "--dir"):
        p.add_argument(name, required=True)
    p.add_argument("--clients", type=int, required=True)
    p.add_argument("--params", type=int, required=True)
    p.add_argument("--lr", type=float, default=0.01)
    a = p.parse_args()
    Path(a.dir).mkdir(parents=True, exist_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(32), options=channel_options(MAX_MESSAGE_BYTES))
    client_pb2_grpc.add_ClientServiceServicer_to_server(PlainFedAvg(Path(a.dir), a.clients, a.params, a.lr), server)
    creds = grpc.ssl_server_credentials([(Path(a.key).read_bytes(), Path(a.cert).read_bytes())])
    server.add_secure_port(a.listen, creds)
    server.start()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    server.stop(1).wait()


if __name__ == "__main__":
    main()
