"""Admin client of party0's AdminService (start training, status, erase, unlearning jobs,
and round control for an external FL server that samples the clients of each round).

The admin credential travels as `x-starfish-admin-token` metadata over TLS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np

from client_sdk.errors import StarfishError
from proto.starfish.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from proto.wire import collect_model, model_hash, model_messages


class AdminClient:
    def __init__(
        self,
        address: str,
        token: str,
        ca_cert: str | Path | bytes,
        timeout_s: float = 60.0,
        chunk_bytes: int = 1024 * 1024,
        max_message_bytes: int = 4 * 1024 * 1024,
    ):
        root = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
        opts = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ]
        self.channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=root), options=opts)
        self.stub = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.metadata = (("x-starfish-admin-token", token),)
        self.timeout_s = timeout_s
        self.chunk_bytes = chunk_bytes

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, fn):
        try:
            return fn()
        except grpc.RpcError as exc:
            raise StarfishError(f"party0 admin call failed ({exc.code().name}): {exc.details()}") from None

    def start_training(self, arch: str, params: np.ndarray, lr: float) -> admin_pb2.TrainingStatus:
        """Install M_0 (flat float32) with learning rate η_l; party0 then opens round 1."""
        flat = np.ascontiguousarray(params, dtype=np.float32).reshape(-1)
        header = common_pb2.ModelHeader(
            round=0, arch=arch, num_params=flat.size, model_hash=model_hash(arch, flat), lr=lr
        )
        return self._call(
            lambda: self.stub.StartTraining(
                model_messages(header, flat, self.chunk_bytes),
                metadata=self.metadata,
                timeout=self.timeout_s,
            )
        )

    def status(self) -> admin_pb2.TrainingStatus:
        return self._call(
            lambda: self.stub.GetTrainingStatus(
                admin_pb2.TrainingStatusRequest(), metadata=self.metadata, timeout=self.timeout_s
            )
        )

    def erase(self, client_id: str) -> admin_pb2.EraseReply:
        return self._call(
            lambda: self.stub.Erase(
                admin_pb2.EraseRequest(client_id=client_id), metadata=self.metadata, timeout=self.timeout_s
            )
        )

    # -- Stage II: unlearning jobs -----------------------------------------------------------
    def unlearn(self, targets: list[str], strategy: str = "starfish", parameters: dict | str | None = None) -> str:
        """File an unlearning request; returns the job id (the job queues behind a running one).
        `parameters` is a mapping or JSON text passed on as is (party0 parses it, once)."""
        text = parameters if isinstance(parameters, str) else json.dumps(parameters or {})
        request = admin_pb2.UnlearnRequest(targets=list(targets), strategy=strategy, parameters_json=text)
        return self._call(lambda: self.stub.Unlearn(request, metadata=self.metadata, timeout=self.timeout_s)).job_id

    def job_status(self, job_id: str) -> admin_pb2.JobStatus:
        return self._call(
            lambda: self.stub.GetJobStatus(
                admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s
            )
        )

    def watch_job(self, job_id: str, timeout_s: float | None = None) -> Iterator[admin_pb2.JobStatus]:
        """Status updates of a job until it ends (succeeded, failed or cancelled)."""
        stream = self.stub.WatchJob(admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=timeout_s)
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise StarfishError(f"party0 admin call failed ({exc.code().name}): {exc.details()}") from None

    def wait_job(self, job_id: str, timeout_s: float | None = None) -> admin_pb2.JobStatus:
        """Block until the job ends; returns its final status."""
        last = None
        for status in self.watch_job(job_id, timeout_s):
            last = status
        if last is None:
            raise StarfishError(f"job {job_id}: no status received")
        return last

    def job_report(self, job_id: str) -> admin_pb2.JobReport:
        return self._call(
            lambda: self.stub.GetJobReport(
                admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s
            )
        )

    def job_certificate(self, job_id: str) -> admin_pb2.JobCertificate:
        """The erasure certificate of a finished job (`certificate_json`, empty with `status`
        and `detail` when the job has none); verify it with `client_sdk.evidence`."""
        return self._call(
            lambda: self.stub.GetJobCertificate(
                admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s
            )
        )

    def job_model(self, job_id: str) -> tuple[common_pb2.ModelHeader, np.ndarray]:
        """The unlearned model of a finished job (header, flat float32), hash-checked."""
        return self._call(
            lambda: collect_model(
                self.stub.GetJobModel(admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s)
            )
        )

    def cancel_job(self, job_id: str) -> admin_pb2.JobStatus:
        """Cancel a queued or running job; returns its status (CANCELLED once it stopped)."""
        return self._call(
            lambda: self.stub.CancelJob(admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s)
        )

    def list_jobs(self) -> admin_pb2.ListJobsReply:
        return self._call(
            lambda: self.stub.ListJobs(admin_pb2.ListJobsRequest(), metadata=self.metadata, timeout=self.timeout_s)
        )

    # -- round control (`[rounds] opening = "on_request"`) -----------------------------------
    def open_round(self, round_index: int) -> admin_pb2.RoundTicket:
        """Open round i (= latest committed + 1) on both parties; a retry returns the same round."""
        request = admin_pb2.RoundOpenRequest(round=int(round_index))
        return self._call(lambda: self.stub.OpenRound(request, metadata=self.metadata, timeout=self.timeout_s))

    def close_round(self, round_index: int, clients: list[str], wait_s: float = 0.0) -> admin_pb2.RoundTicket:
        """Close round i once every client in `clients` has an upload on both parties (empty:
        with the uploads there are); with `wait_s`, reply when it is committed or failed."""
        request = admin_pb2.RoundCloseRequest(round=int(round_index), clients=list(clients), wait_s=wait_s)
        return self._call(
            lambda: self.stub.CloseRound(request, metadata=self.metadata, timeout=self.timeout_s + wait_s)
        )

    def global_model(self, round_index: int | None = None) -> tuple[common_pb2.ModelHeader, np.ndarray]:
        """Committed global model M_i (latest when None): header and flat float32, hash-checked."""
        request = admin_pb2.GlobalModelRequest(round=round_index or 0, latest=round_index is None)
        return self._call(
            lambda: collect_model(self.stub.GetGlobalModel(request, metadata=self.metadata, timeout=self.timeout_s))
        )

    def list_tasks(self, job_id: str) -> list[admin_pb2.TaskEntry]:
        """Open warm-up/correction tasks of a job on party0 (task id, client, kind, deadline)."""
        reply = self._call(
            lambda: self.stub.ListTasks(admin_pb2.JobRef(job_id=job_id), metadata=self.metadata, timeout=self.timeout_s)
        )
        return list(reply.tasks)


def request_own_unlearning(
    address: str,
    client_id: str,
    token: str,
    ca_cert: str | Path | bytes,
    parameters: dict | None = None,
    timeout_s: float = 60.0,
) -> str:
    """A client files the unlearning of its own data at party0 with its client credential;
    returns the job id (the admin follows the job). The job runs Starfish with the operator's
    parameters: `parameters` other than those (or none) are refused (PERMISSION_DENIED)."""
    root = ca_cert if isinstance(ca_cert, bytes) else Path(ca_cert).read_bytes()
    with grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=root)) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        request = admin_pb2.UnlearnRequest(
            targets=[client_id], strategy="starfish", parameters_json=json.dumps(parameters or {})
        )
        try:
            return stub.Unlearn(
                request, metadata=(("x-starfish-client", client_id), ("x-starfish-token", token)), timeout=timeout_s
            ).job_id
        except grpc.RpcError as exc:
            raise StarfishError(f"party0 refused the unlearning request ({exc.code().name}): {exc.details()}") from None
