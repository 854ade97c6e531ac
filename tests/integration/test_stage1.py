"""Stage I end to end: both parties as real processes with TLS, SDK clients as threads.

* 3 rounds, 5 clients, a small torch MLP: the committed global models equal plaintext
  FedAvg of the same gradients within fixed-point tolerance; neither data dir holds any
  gradient in the clear, and each stored share is statistically unrelated to its gradient.
* A client whose upload reaches only one party is left out of that round, both parties record
  and report why (admin status, the client's upload status); nothing else breaks.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from client_sdk.sharing import make_sharing
from client_sdk.torch_helper import flatten, make_grad_fn
from harness.local import LocalDeployment
from proto.binding import round_target
from proto.starfish.v1 import client_pb2, client_pb2_grpc, common_pb2
from server.store import Store

from helpers.stage1_helpers import (
    F,
    fedavg_step,
    run_clients,
    scan_for_plaintext,
    share_is_unrelated,
    tolerance,
    wait_committed,
)

pytestmark = pytest.mark.timeout(400)
LR = 0.5
CLIENTS = [f"client{i}" for i in range(5)]


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 3))


def _grad_fns() -> dict:
    fns = {}
    for j, cid in enumerate(CLIENTS):
        gen = torch.Generator().manual_seed(100 + j)
        n = 20 + 7 * j
        x = torch.randn(n, 12, generator=gen)
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
        fns[cid] = make_grad_fn(_mlp(), DataLoader(TensorDataset(x, y), batch_size=16))
    return fns


def test_three_rounds_equal_plaintext_fedavg_and_no_gradient_in_the_clear(tmp_path):
    dep = LocalDeployment(
        tmp_path / "dep", clients=CLIENTS, rounds={"deadline_s": 60.0, "poll_s": 0.05, "max_rounds": 3}
    )
    dep.start()
    try:
        m0 = flatten(_mlp())
        admin = dep.admin()
        admin.start_training("mlp-12-24-3", m0, LR)
        admin.close()
        record: dict = {}
        errors = run_clients(dep, _grad_fns(), range(1, 4), record)
        assert not errors, errors
        status = wait_committed(dep, 3)
        assert [len(r.members) for r in status.rounds] == [5, 5, 5]
        with dep.client("client0") as c:
            models = [c.fetch_model(i).params for i in range(4)]
        chained = m0.astype(np.float64)
        for r in range(1, 4):
            uploads = [record[(r, cid)] for cid in CLIENTS]
            # the round's update, from the committed M_{r-1}
            expected = fedavg_step(models[r - 1], uploads, LR)
            assert np.all(np.abs(models[r] - expected) <= tolerance(LR, expected))
            chained = fedavg_step(chained, uploads, LR)
        assert np.max(np.abs(models[3] - chained)) < 1e-4  # whole run against plaintext FedAvg
        assert not np.allclose(models[3], m0)
        # nothing in the clear on disk, while the parties run (scan before the erase check)
        logs = "".join((dep.root / "logs" / f"party{r}.log").read_text() for r in (0, 1))
        secrets = [dep.creds["admin_token"], *dep.creds["clients"].values()]
        assert "round 3 committed" in logs and not [t for t in secrets if t in logs]  # no credential in the logs
        gradients = [g for g, _ in record.values()]
        for role in (0, 1):
            assert scan_for_plaintext(dep.data_dir(role), gradients) == []
            store = Store(dep.data_dir(role), role, readonly=True)
            for (r, cid), (g, _) in record.items():
                corr, negative = share_is_unrelated(store.load_share(r, cid).gradient, g)
                assert corr < 0.25 and 0.4 < negative < 0.6, (role, r, cid, corr, negative)
        _check_erase(dep)
    finally:
        dep.stop()


def _check_erase(dep) -> None:
    """Admin erase of client4: both parties delete its three round shares and return receipts."""
    admin = dep.admin()
    reply = admin.erase("client4")
    admin.close()
    by_party = {r.party: r for r in reply.receipts}
    assert set(by_party) == {0, 1}
    for role, receipt in by_party.items():
        assert list(receipt.rounds) == [1, 2, 3] and receipt.rows_deleted == 3
        store = Store(dep.data_dir(role), role, readonly=True)
        assert all("client4" not in store.uploads(r) for r in (1, 2, 3))
        assert "client4" in store.round_members(1)  # the public history of the round stays
    # each round one party held the full share (a file), the other a seed (a row)
    assert sum(r.files_deleted for r in reply.receipts) == 3
    assert sum(r.bytes_deleted for r in reply.receipts) == 3 * 8 * flatten(_mlp()).size
    assert not list(dep.data_dir(0).rglob("client4.i64")) and not list(dep.data_dir(1).rglob("client4.i64"))


def _upload_to_party0_only(dep, cid: str, round_index: int, model_hash: str, g: np.ndarray, n: int) -> None:
    sharing = make_sharing(cid, round_target(round_index), g, n, model_hash, (F, 2.0**20), 0.4, compress_mask=False)
    header, data = sharing.header(0), sharing.halves[0].data
    creds = grpc.ssl_channel_credentials(root_certificates=dep.ca_cert.read_bytes())
    with grpc.secure_channel(dep.address(0), creds) as ch:
        ack = client_pb2_grpc.ClientServiceStub(ch).UploadShares(
            iter([common_pb2.UploadChunk(header=header), common_pb2.UploadChunk(data=data)]),
            metadata=(("x-starfish-client", cid), ("x-starfish-token", dep.creds["clients"][cid])),
            timeout=10,
        )
    assert ack.party == 0 and not ack.duplicate


def test_upload_to_only_one_party_excludes_that_client(tmp_path):
    dep = LocalDeployment(tmp_path / "dep", clients=["a", "b", "c", "d"], rounds={"deadline_s": 3.0, "poll_s": 0.05})
    dep.start()
    try:
        m = 30
        admin = dep.admin()
        admin.start_training("toy", np.zeros(m, dtype=np.float32), LR)
        admin.close()
        grads = {cid: np.random.default_rng(k).normal(size=m) for k, cid in enumerate(["a", "b", "c", "d"])}
        clients = {cid: dep.client(cid) for cid in grads}
        for c in clients.values():
            c.register()
        view = clients["a"].wait_for_round(0, timeout_s=90)
        clients["a"].submit(view.round, grads["a"], 4)
        clients["b"].submit(view.round, grads["b"], 6)
        clients["d"].submit(view.round, grads["d"], 3)
        # client c's upload reaches party0 only (its upload to party1 is lost)
        _upload_to_party0_only(dep, "c", view.round, view.model_hash, grads["c"], 5)
        status = wait_committed(dep, 1, timeout_s=120)
        assert {mb.client_id for mb in status.rounds[0].members} == {"a", "b", "d"}
        assert status.rounds[0].committed_unix >= status.rounds[0].opened_unix > 0
        model = clients["a"].fetch_model(1).params
        # three principals at k = 3: no one above a third of the weight, so each counts min n_j = 3
        expected = fedavg_step(np.zeros(m), [(grads["a"], 3), (grads["b"], 3), (grads["d"], 3)], LR)
        assert np.all(np.abs(model - expected) <= tolerance(LR, expected))
        assert "c" in Store(dep.data_dir(0), 0, readonly=True).uploads(1)  # stored, acked, but not aggregated
        assert [(e.client_id, e.reason) for e in status.rounds[0].excluded] == [
            ("c", "only party0 holds an upload (party1 did not receive it before the round closed)")
        ]
        told = clients["c"].upload_status(1)  # both parties tell the client why
        assert told.outcome == "excluded" and told.final and "only party0" in told.reason
        assert {s.state for s in told.parties} == {client_pb2.UPLOAD_STATE_EXCLUDED}
        assert clients["a"].upload_status(1).outcome == "counted"
        nxt = clients["a"].wait_for_round(1, timeout_s=90)  # training continues
        assert nxt.round == 2
        for c in clients.values():
            c.close()
    finally:
        dep.stop()
