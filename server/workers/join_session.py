"""Joining a worker's MPC session (docs/JOBS.md, section 2, step 1).

party0's worker listens on its configured address and tells its party the port (which
party0 announces to party1: StartJob or ClipRound), party1's worker connects there; both
join the session at the dealer service and report which dealer (identity, certificate
fingerprint) serves it. A job's attempt and a Stage I clip session open theirs alike.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from mpc.plane.tls import TlsFiles
from mpc.session import Endpoint, Session, SessionConfig
from server.workers.parent_link import ParentLink
from server.workers.process import WorkerSpec

log = logging.getLogger("server.workers.worker")


def open_session(spec: WorkerSpec, link: ParentLink) -> Session:
    """Join the attempt's session: party0 announces its port first (see the module doc)."""
    session = Session(
        SessionConfig(
            rank=spec.role,
            session_id=spec.session_id,
            peer=Endpoint(spec.peer_host, spec.peer_port),
            dealer=Endpoint(spec.dealer_host, spec.dealer_port),
            tls=TlsFiles(Path(spec.tls_ca), Path(spec.tls_cert), Path(spec.tls_key)),
            peer_identity=spec.peer_identity,
            dealer_identity=spec.dealer_identity,
            precision_bits=spec.precision_bits,
            timeout_s=spec.session_timeout_s,
        )
    )
    if spec.role == 0:
        port = session.listen()
        log.info("job %s: session %s listening on %s:%d", spec.job_id, spec.session_id, spec.peer_host, port)
        link.send({"kind": "listening", "port": port})
    else:
        log.info("job %s: joining session %s at %s:%d", spec.job_id, spec.session_id, spec.peer_host, spec.peer_port)
    session.open()
    dealer = session.dealer
    assert dealer is not None  # set once the session is open
    link.send({"kind": "session", "session_id": spec.session_id, "dealer": asdict(dealer)})
    log.info("job %s: session %s open; dealer %s (%s)", spec.job_id, spec.session_id, dealer.identity, dealer.address)
    return session
