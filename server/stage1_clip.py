"""Stage I rounds under distributed DP: the party's side of a round's clip session
(docs/PRIVACY.md, "Differential privacy", Stage I; docs/SERVICE.md, "Round protocol").

With `[privacy] dp = true` no party ever sends its share of Σ n_j·[g_j] (party1 refuses
ExchangeAggregate). Once the membership S_i is agreed, round i closes by a short session of
the job machinery — one job worker per party (`server.workers.process`), the TLS MPC plane and
the dealer service — that computes, with the client norms secret,

    G_i = reveal_noised( Σ_{j∈S_i} w_j·SecClip(g_j, C) ),   M_i = M_{i−1} − η_l·G_i

(`server.stage1_clip_attempt`). party0 starts its worker (it listens), then asks party1 with
ClipRound to join the session; party1 starts its worker, waits for it and stores its
candidate M_i; party0 waits for its own worker, derives M_i from the same opened G_i, and
commits through CommitRound (hashes compared) as in the plain round.

Durability and retries: each party logs the round as released (`Stage1Privacy.record`,
fsynced) before its worker starts; its noise is keyed by the round and membership, so a
repeated session opens the same noise. A session that fails (a worker crash, the dealer,
the peer) leaves no candidate model: M_i is stored only from a worker that exited 0 with a
result whose hash matches the file it wrote, and party0 stores its candidate only once
party1 answered with the same hash — so a party0 restarted with a stored candidate commits
it without another session. The coordinator retries a failed round with a new session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

import numpy as np

from proto.starfish.v1 import peer_pb2
from proto.wire import model_hash
from server.aggregation import apply_update
from server.config import PartyConfig
from server.peer_client import PeerClient, PeerRefused
from server.stage1_dp import Stage1Privacy
from server.store import Store
from server.workers.failures import exit_description, last_error_line
from server.workers.process import Standby, WorkerProcess, WorkerSpec, spawn_worker

log = logging.getLogger(__name__)
STAGE1_CLIP = "stage1_clip"  #: `WorkerSpec.task` of a clip session
#: what a clip session's worker runs (`server.workers.worker` imports it by this name)
CLIP_SESSION_MODULE = "server.stage1_clip_attempt"
AGGREGATE_FILE = "aggregate.npy"
COSTS_FILE = "costs.json"
WORKER_START_S = 120.0  #: a worker not taken from standby imports torch and CrypTen before it listens
POLL_S = 0.05


class ClipFailed(RuntimeError):
    """A clip session ended without a usable result; the round is retried with a new session."""


def aggregate_digest(aggregate: np.ndarray) -> str:
    """SHA-256 of G_i's float64 bytes: what the worker reports and the party checks."""
    return hashlib.sha256(np.ascontiguousarray(aggregate, dtype=np.float64).tobytes()).hexdigest()


def new_session_id(round_index: int) -> str:
    """A fresh session id of round i (letters, digits, '.', '-')."""
    return f"stage1-{round_index}.{int(time.time())}-{os.urandom(4).hex()}"


class Stage1Clipper:
    """Starts and collects this party's clip-session workers (module docstring)."""

    def __init__(self, cfg: PartyConfig, store: Store, privacy: Stage1Privacy):
        self.cfg = cfg
        self.store = store
        self.privacy = privacy
        self.root = Path(cfg.data_dir) / "stage1-clip"
        spawn = partial(spawn_worker, CLIP_SESSION_MODULE)
        self.workers = Standby(spawn, self.root / "logs", "clip", cfg.jobs.standby != "off")
        self._lock = threading.Lock()
        self._running: dict[int, tuple[str, WorkerProcess]] = {}  #: party1: round → its session's worker
        if cfg.jobs.standby == "always":  # "on_demand": from the first session on
            self.workers.fill()

    def close(self) -> None:
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for _, worker in running:
            worker.kill()
        self.workers.close()

    def _spec(self, round_index: int, digest: str, session_id: str, host: str, port: int) -> WorkerSpec:
        cfg, jc = self.cfg, self.cfg.jobs
        dealer_host, dealer_port = jc.dealer_address
        previous = round_index - 1
        return WorkerSpec(
            job_id=f"stage1-round-{round_index}",
            role=cfg.role,
            attempt=1,
            data_dir=str(Path(cfg.data_dir).resolve()),
            job_dir=str((self.root / session_id).resolve()),
            arch=self.store.global_model(0).arch,
            targets=[],
            strategy="",
            parameters={"membership_sha256": digest},
            base_round=previous,
            base_model_hash=self.store.global_model_hash(previous) or "",
            session_id=session_id,
            peer_host=host,
            peer_port=port,
            peer_identity=cfg.tls.peer_name,
            dealer_host=dealer_host,
            dealer_port=dealer_port,
            dealer_identity=jc.dealer_identity,
            tls_ca=str(Path(cfg.tls.ca).resolve()),
            tls_cert=str(Path(cfg.tls.cert).resolve()),
            tls_key=str(Path(cfg.tls.key).resolve()),
            precision_bits=cfg.precision_bits,
            session_timeout_s=jc.session_timeout_s,
            step_check=jc.step_check,
            task_timeout_s=jc.task_timeout_s,
            task_poll_s=jc.task_poll_s,
            dp=asdict(self.privacy.settings),
            task=STAGE1_CLIP,
        )

    def start(self, round_index: int, digest: str, session_id: str, host: str, port: int) -> WorkerProcess:
        """Log round i as released (durably), then hand a worker the session. Earlier
        sessions' aggregates are removed (public once their M_i is stored; a repeated call
        of a running session may still read its own); their costs and logs stay."""
        self.privacy.record(round_index, list(self.store.round_members(round_index)))
        for old in self.root.glob(f"*/{AGGREGATE_FILE}"):
            old.unlink(missing_ok=True)
        folder = self.root / session_id
        folder.mkdir(parents=True, exist_ok=True)
        path = self._spec(round_index, digest, session_id, host, port).write(folder / "spec.json")
        proc, log_path = self.workers.take()
        worker = WorkerProcess.assign(proc, log_path, path, lambda _msg: None)
        log.info("round %d: clip session %s, worker %d started", round_index, session_id, worker.pid)
        return worker

    def follow(self, round_index: int, digest: str, session_id: str, host: str, port: int) -> str:
        """party1: join (or keep waiting for) the session; returns the hash of the candidate M_i."""
        with self._lock:
            current = self._running.get(round_index)
            if current is None or current[0] != session_id:
                if current is not None:
                    current[1].kill()
                current = (session_id, self.start(round_index, digest, session_id, host, port))
                self._running[round_index] = current
        try:
            aggregate, online_bytes = self.collect(current[1], session_id)
            arch, params = self.next_model(round_index, aggregate)
            return self.store.set_round_output(round_index, arch, params, peer_bytes=online_bytes)
        finally:
            with self._lock:
                if self._running.get(round_index) is current and current[1].poll() is not None:
                    del self._running[round_index]

    def lead(self, round_index: int, digest: str, peer: PeerClient) -> str:
        """party0: run round i's session with party1; returns the hash of the candidate M_i,
        which party1 holds too (else `ClipFailed`)."""
        rec = self.store.round_record(round_index)
        if rec is not None and rec.state == "aggregated" and rec.model_out_hash:  # party1 confirmed it before
            return rec.model_out_hash
        jc = self.cfg.jobs
        session_id = new_session_id(round_index)
        worker = self.start(round_index, digest, session_id, jc.mpc_host, jc.mpc_port)
        try:
            port = worker.wait_listening(jc.session_timeout_s + WORKER_START_S)
            request = peer_pb2.ClipRoundRequest(
                round=round_index,
                membership_sha256=digest,
                session_id=session_id,
                rendezvous=f"tls://{jc.advertised_host}:{port}",
                dealer_identity=jc.dealer_identity,
            )
            try:
                theirs = peer.unary("ClipRound", request).model_hash
            except PeerRefused as exc:
                if exc.code is not None and exc.code.name == "ABORTED":  # party1's session failed: retry
                    raise ClipFailed(str(exc)) from None
                raise
            aggregate, online_bytes = self.collect(worker, session_id)
            arch, params = self.next_model(round_index, aggregate)
        except OSError as exc:
            raise ClipFailed(f"party0 could not start the clip session: {exc}") from None
        finally:
            if worker.poll() is None:
                worker.kill()
        mine = model_hash(arch, params)
        if mine != theirs:  # stored only when both hold it: a stored candidate is one party1 confirmed
            raise ClipFailed(f"round {round_index}: party1's candidate model {theirs[:12]} differs from {mine[:12]}")
        return self.store.set_round_output(round_index, arch, params, peer_bytes=online_bytes)

    def collect(self, worker: WorkerProcess, session_id: str) -> tuple[np.ndarray, int]:
        """Wait for the worker; G_i from its file, checked against the hash it reported, and
        the session's online bytes between the parties."""
        limit = time.monotonic() + WORKER_START_S + 4 * self.cfg.jobs.session_timeout_s
        while (code := worker.poll()) is None:
            if time.monotonic() > limit:
                worker.kill()
                raise ClipFailed(f"party{self.cfg.role} clip worker of session {session_id} timed out")
            time.sleep(POLL_S)
        folder = self.root / session_id
        if code != 0 or worker.result is None:
            last = last_error_line(worker.log_path) if worker.log_path is not None and code > 0 else ""
            what = f"party{self.cfg.role} clip worker {exit_description(code)}"
            raise ClipFailed(what + (f": {last}" if last else ""))
        aggregate = np.load(folder / AGGREGATE_FILE, allow_pickle=False)
        if aggregate_digest(aggregate) != worker.result.get("model_hash"):
            raise ClipFailed(f"party{self.cfg.role}: the clipped aggregate file does not match its reported hash")
        costs = json.loads((folder / COSTS_FILE).read_text()).get("stage1 clip", {})
        log.info(
            "clip session %s: %.2f s, online %d bytes in %d rounds, offline %d bytes",
            session_id,
            float(costs.get("seconds", 0.0)),
            int(costs.get("online_bytes", 0)),
            int(costs.get("online_rounds", 0)),
            int(costs.get("offline_bytes", 0)),
        )
        return aggregate, int(costs.get("online_bytes", 0))

    def next_model(self, round_index: int, aggregate: np.ndarray) -> tuple[str, np.ndarray]:
        """(arch, M_i = M_{i−1} − η_l·G_i) of round i."""
        rec = self.store.round_record(round_index)
        assert rec is not None
        previous = self.store.model_by_hash(rec.model_in_hash)
        if aggregate.shape != previous.params.shape:
            raise ClipFailed(f"round {round_index}: the clipped aggregate has {aggregate.size} entries")
        return previous.arch, apply_update(previous.params, aggregate, rec.lr)
