"""Secrets at rest: a party's store, job folders, checkpoints and task answers are 0700/0600
whatever the umask; another local user (`nobody`) cannot read them; a party refuses a store
directory others may read, naming the path (server.file_modes)."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.local import LocalDeployment
from mpc.fixedpoint import random_ring
from server.file_modes import ExposedStoreError, check_private
from server.jobs.checkpoints import CheckpointDir
from server.jobs.jobstore import JobStore
from server.store import Store
from tests.server.test_jobs_parts import _export, _state

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask of an operator's shell that makes files world-readable by default."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _party_store(root: Path) -> tuple[Store, JobStore]:
    """A store with a model, an upload (share + seed row) and a job with a checkpoint (left open:
    SQLite's -wal and -shm files exist while a connection is)."""
    st = Store(root, 0)
    h = st.install_initial_model("toy", np.arange(7, dtype=np.float32), 0.1)
    st.open_round(1, h, deadline=1e12, lr=0.1)
    st.put_upload(1, "alice", 5, random_ring(7), random_ring(1), random_ring(1), h)
    jobs = JobStore(root)
    CheckpointDir(jobs.job_dir("job-1") / "checkpoints").save(
        _state(1, random_ring(2), random_ring(7), random_ring(7)), {}, _export
    )
    return st, jobs


def request_cleanup(path: Path) -> None:
    """Leave nothing behind in /tmp (the test's store is removed at interpreter exit)."""
    atexit.register(shutil.rmtree, path, True)


def _walk(root: Path) -> list[Path]:
    return [root, *root.rglob("*")]


def test_store_jobs_and_checkpoints_are_private_under_a_loose_umask(tmp_path: Path, loose_umask):
    root = tmp_path / "party0"
    _party_store(root)
    paths = _walk(root)
    assert any(p.suffix == ".i64" for p in paths) and any(p.name == "meta.sqlite-wal" for p in paths)
    assert any(p.name == "jobs.sqlite" for p in paths) and any(p.name == "public.json" for p in paths)
    for path in paths:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} has mode {mode:04o}"


def _readable_by_nobody(path: Path) -> bool:
    """Whether user `nobody` can open `path` for reading (a real second process, another uid)."""
    proc = subprocess.run(
        ["head", "-c", "1", str(path)],
        preexec_fn=lambda: (os.setgid(NOBODY), os.setuid(NOBODY)),
        capture_output=True,
        timeout=30,
    )
    return proc.returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to user nobody needs root")
def test_nobody_cannot_read_what_starfish_up_creates(loose_umask):
    world = Path(tempfile.mkdtemp(prefix="starfish-modes-"))  # /tmp: every user may walk to it
    os.chmod(world, 0o755)
    request_cleanup(world)
    (world / "probe").write_bytes(b"x")  # 0644 under this umask: the check itself can see a readable file
    assert _readable_by_nobody(world / "probe")
    dep = LocalDeployment(world / "run", clients=["alice"])
    os.chmod(dep.root, 0o755)  # even with the top directory opened up, the stores stay closed
    _party_store(dep.data_dir(0))
    secrets_at_rest = [p for p in _walk(dep.data_dir(0)) if p.is_file()]
    assert secrets_at_rest
    for path in secrets_at_rest + [dep.cred_path, dep.root / "certs" / "party0.key"]:
        assert not _readable_by_nobody(path), f"nobody read {path}"


def test_party_refuses_a_store_others_can_read(tmp_path: Path):
    dep = LocalDeployment(tmp_path / "run", clients=["alice"])
    os.chmod(dep.data_dir(0), 0o755)
    proc = subprocess.run(
        [sys.executable, "-m", "party0", "--config", str(dep.config_path(0))],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"{dep.data_dir(0)} has mode 0755" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["meta.sqlite", "meta.sqlite-wal", "jobs/jobs.sqlite"])
def test_check_names_an_exposed_database(tmp_path: Path, name: str):
    root = tmp_path / "party0"
    _party_store(root)
    check_private(root)
    target = root / name
    os.chmod(target, 0o644)
    with pytest.raises(ExposedStoreError, match=str(target)):
        check_private(root)
