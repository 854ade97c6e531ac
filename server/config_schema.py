"""The party configuration's schema: every section and key of a party's TOML, once.

`server.config` builds the schema once (`party_schema()`, with its dataclasses' defaults)
and checks a file against it before reading any value (an
unknown key or section is refused with the nearest known spelling, `mpc.toml_schema`),
and the reference table of docs/SERVICE.md is generated from it (`python -m
server.config_doc`). Defaults of the dataclass-backed sections are read from the
dataclasses that hold the parsed values, so the table cannot disagree with the code;
tests/server/test_config_schema.py checks that every dataclass field has its key here and
that the document is current.
"""

from __future__ import annotations

from mpc.toml_schema import Key, Schema, Section, dataclass_keys

TOP = {
    "role": "0 (leader: orders rounds, serves the admin API) or 1 (helper: follows and verifies)",
    "listen": "client service, `host:port`: server-side TLS 1.3 + per-call tokens; of the admin API only a "
    "client's own unlearning request (AdminService/Unlearn with its client credential) is answered here",
    "peer_listen": "peer service, `host:port`: mutual TLS 1.3, only the other party's certificate is accepted",
    "peer_address": "the other party's `peer_listen`",
    "data_dir": "the durable store; created 0700, refused at start when others may read or write it",
}
ADMIN_LISTEN = (
    "party0: the admin API's own listener, `host:port` (server-side TLS 1.3 + the admin token); bind it to an "
    'operator-only address. "" = no admin API. party1 has none'
)
TLS = {
    "ca": "CA certificate (path relative to the file)",
    "cert": "this party's certificate: its common name must be `party<role>`",
    "key": "this party's private key",
}
OTHER = {
    "tls.peer_name": "common name the other party's certificate must carry",
    "signing.cert": "this party's erasure-signing certificate (docs/OPERATIONS.md); with `key` or not at all",
    "signing.key": "its private key",
    "fixed_point.precision_bits": "f of the Z_2^64 fixed-point encoding, 1..40; served to clients, "
    "which refuse parties that disagree",
    "fixed_point.max_abs": "largest \\|x\\| a client may encode (2^20)",
    "auth.admin_token_sha256": "sha256 hex digest of the admin token",
    "auth.clients": '`client_id = "<sha256 hex of its token>"`; ids: letters, digits, `_ . -`, ≤ 64 characters',
    "auth.principals": '`client_id = "<principal>"`: the organisation the operator issued the credential to; '
    "clients of one principal count once in every cohort and their weights are pooled for the weight cap; "
    'a client not listed is its own principal; both parties must list the same (docs/PRIVACY.md, "Principals")',
    "privacy.min_cohort": "k: the fewest principals any revealed aggregate may cover, and no principal may hold more "
    "than 1/k of its weight (below 2 refused; docs/PRIVACY.md)",
    "unlearning.parameters": "the operator's unlearning parameters: what a client's own request gets",
    "unlearning.bounds": "`name = [low, high]`: the range an admin override must lie in",
}
DP = {
    "dp": ("false", "distributed differential privacy of every published aggregate (docs/PRIVACY.md)"),
    "clip": ("1", "C: per-client L2 clipping norm"),
    "noise_multiplier": ("1", "z: σ = z·C·max_j w_j per revealed aggregate (or `epsilon`)"),
    "epsilon": ("", "a target ε over `planned_releases`, instead of `noise_multiplier`"),
    "planned_releases": ("", "releases one client may take part in (with `epsilon`)"),
    "delta": ("1e-05", "δ of the accountant"),
    "schedule": ('"fixed"', '"fixed" or "fedadp" (adaptive calibration)'),
}
ROUNDS = {
    "deadline_s": "a round closes at the latest this long after it opens",
    "min_clients": "fewer common uploads at the deadline: the deadline is extended",
    "max_rounds": "stop opening rounds after this many (0: no limit)",
    "poll_s": "how often the coordinator looks at upload progress",
    "peer_timeout_s": "per-call deadline on the peer channel",
    "peer_retry_s": "first back-off after a failed peer call (doubles, capped at 5 s)",
    "opening": '"auto": the next round opens when the previous commits; "on_request": when the admin asks',
    "recovery_grace_s": "a round whose deadline passed while a party was away closes this long after both are back",
}
LIMITS = {
    "max_message_bytes": "gRPC message cap in both directions; anything larger is streamed",
    "chunk_bytes": "size of streamed chunks (a multiple of 8, below the cap)",
    "max_model_params": "largest model (parameters)",
    "max_samples": "largest n_j of one client; at most the round's sample budget",
    "max_lr": "largest learning rate `StartTraining` accepts",
    "min_free_bytes": "no round opens while the data dir has less free space (0: no check; docs/SERVICE.md, "
    '"Storage faults and recovery")',
}
ADMISSION = {
    "max_streams_per_client": "open WatchTasks streams of one client",
    "max_requests_per_client": "other concurrent calls of one client",
    "max_streams": "WatchTasks streams of all clients together",
    "max_requests": "other concurrent client calls of all clients together",
    "admin_threads": "worker threads kept for the admin API and health checks",
}
OBSERVABILITY = {
    "metrics_listen": 'Prometheus endpoint `host:port` (GET /metrics); "" = none',
    "metrics_tls": "serve the metrics over HTTPS (TLS 1.3) with this party's certificate",
    "log_format": '"text" or "json" (one object per line)',
}
JOBS = {
    "mpc_host": "the one address party0's worker listens on during a job",
    "mpc_port": "that listener's port; 0 = a free port per attempt",
    "mpc_advertise": 'host party1 is told to connect to ("" = `mpc_host`; required for a wildcard)',
    "dealer": 'the dealer service, `host:port` ("" = none: unlearn requests are refused)',
    "dealer_identity": "common name the dealer's certificate must carry",
    "dealer_independent": "false only in a single-operator demo (status and reports say so)",
    "session_timeout_s": "bound on every wait inside the MPC session",
    "step_check": 'CrypTen backend lock-step check: "op", "boundary" or "off"',
    "task_timeout_s": "deadline of a task after it is posted",
    "task_poll_s": "how often a worker looks for answers",
    "max_attempts": "failed session attempts in a row without progress before the job fails",
    "retry_backoff_s": "pause between attempts",
    "poll_s": "job runner polling interval",
    "standby": 'keep a worker started in advance: "always", "on_demand", "off"',
    "pause_training_after_s": "longest wait of a job for the open round to end before the round is ended "
    "(a round without uploads is ended at once; docs/JOBS.md §2)",
    "keep_failed_checkpoints_s": "a failed job's checkpoints are removed this long after it failed at the latest",
}


VALIDATION = {
    "enabled": 'check every upload and task answer in 2PC before use (docs/SERVICE.md, "Upload check"); '
    "unset: on when `[jobs] dealer` is set; true needs a dealer",
    "max_norm": "C, the bound on ‖g‖₂ of an upload or task answer; 0 = the largest the ring allows for the model "
    "(`mpc.input_check.largest_norm`, fixed at StartTraining)",
}


EVALUATION = {
    "enabled": "after a job succeeds, ask the remaining clients to evaluate M̂ and M_T on their own data "
    "(docs/JOBS.md §7); runs only with `[jobs] dealer`",
    "deadline_s": "how long the clients have to answer an evaluation task",
    "max_eval_samples": "N: the largest count an evaluation answer may carry (below 2^40); larger answers are refused",
    "probe": 'the probe the clients also score, passed to their callback ("" = none; e.g. "class:7", "backdoor")',
}


def _keys(section: str, names: tuple[str, ...], defaults: dict[str, str]) -> tuple[Key, ...]:
    return tuple(Key(n, defaults.get(n, ""), OTHER[f"{section}.{n}"]) for n in names)


def build_party_schema(
    rounds: type,
    privacy: type,
    limits: type,
    admission: type,
    observability: type,
    jobs: type,
    validation: type,
    evaluation: type,
) -> Schema:
    """The schema of a party's TOML, with the defaults of the dataclasses that hold each table
    (server.config passes them and keeps the result: `server.config.party_schema`)."""
    return Schema(
        "party",
        (
            Section(
                "",
                tuple(Key(n, "", m, required=True) for n, m in TOP.items())
                + (Key("admin_listen", '""', ADMIN_LISTEN),),
            ),
            Section(
                "tls",
                tuple(Key(n, "", m, required=True) for n, m in TLS.items())
                + _keys("tls", ("peer_name",), {"peer_name": '"party<1-role>"'}),
            ),
            Section("signing", _keys("signing", ("cert", "key"), {})),
            Section(
                "fixed_point",
                _keys("fixed_point", ("precision_bits", "max_abs"), {"precision_bits": "16", "max_abs": "1048576"}),
            ),
            Section("auth", _keys("auth", ("admin_token_sha256",), {"admin_token_sha256": '""'})),
            Section("auth.clients", (Key("<client id>", "", OTHER["auth.clients"]),), free=True),
            Section("auth.principals", (Key("<client id>", "", OTHER["auth.principals"]),), free=True),
            Section("rounds", dataclass_keys(rounds, ROUNDS)),
            Section(
                "privacy",
                dataclass_keys(privacy, {"min_cohort": OTHER["privacy.min_cohort"]})
                + tuple(Key(n, d, m) for n, (d, m) in DP.items()),
            ),
            Section("limits", dataclass_keys(limits, LIMITS)),
            Section("admission", dataclass_keys(admission, ADMISSION)),
            Section("observability", dataclass_keys(observability, OBSERVABILITY)),
            Section("jobs", dataclass_keys(jobs, JOBS)),
            Section("validation", dataclass_keys(validation, VALIDATION)),
            Section("evaluation", dataclass_keys(evaluation, EVALUATION)),
            Section("unlearning", ()),
            Section("unlearning.parameters", (Key("<parameter>", "", OTHER["unlearning.parameters"]),), free=True),
            Section("unlearning.bounds", (Key("<parameter>", "", OTHER["unlearning.bounds"]),), free=True),
        ),
    )
