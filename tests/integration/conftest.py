"""One trained service shared by the Stage II tests (training takes most of a minute)."""

from __future__ import annotations

import pytest

import starfish_flower.offline  # noqa: F401  (before any flwr import: no telemetry leaves the machine)

from helpers.stage2_fixtures import stage2_service


@pytest.fixture(scope="session")
def stage2(tmp_path_factory):
    with stage2_service(tmp_path_factory.mktemp("stage2")) as svc:
        yield svc


@pytest.fixture(scope="session")
def certified_job(stage2):
    """One finished job (target c6, which no other test uses) on the shared service, with its report and certificate."""
    import json

    from proto.starfish.v1 import admin_pb2

    with stage2.dep.admin() as admin:
        job_id = admin.unlearn(["c6"], parameters={"beta": 0.25})
        done = admin.wait_job(job_id, 180)
        assert done.state == admin_pb2.JOB_STATE_SUCCEEDED, done.error
        stage2.erased.append("c6")
        report = json.loads(admin.job_report(job_id).report_json)
        certificate = admin.job_certificate(job_id)
    return job_id, report, certificate
