"""Party configuration, read from a TOML file (tomllib; no code is evaluated).

One file per party. Paths inside it are relative to the file's directory.
Client and admin credentials are stored as sha256 hex digests of the tokens, so a
leaked config file does not leak credentials. Every key: server.config_schema (and the table of
docs/SERVICE.md generated from it); an unknown key or section is refused before anything else.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from mpc.eval_counts import MAX_BITS
from mpc.fixedpoint import DEFAULT_PRECISION_BITS, MAX_ABS_DEFAULT
from mpc.toml_schema import Schema, SchemaError, address
from privacy.settings import DP_KEYS, DPConfig, parse_dp_config
from server.config_schema import build_party_schema
from server.headroom import round_sample_budget
from server.job_config import JobConfig
from server.unlearning_policy import PolicyError, UnlearningPolicy, parse_policy

CLIENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""Client ids are used in file names: letters, digits, `_ . -`, at most 64 characters."""


class ConfigError(ValueError):
    """The party configuration is missing a key or holds an invalid value."""


def token_digest(token: str) -> str:
    """sha256 hex digest under which a credential token is stored in the config."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TlsConfig:
    """Certificates: the CA that signs everything, this party's certificate and key."""

    ca: Path
    cert: Path
    key: Path
    peer_name: str  #: common name the other party's certificate must carry


ROUND_OPENING = frozenset({"auto", "on_request"})


@dataclass(frozen=True)
class SigningConfig:
    """This party's erasure-signing certificate and key (`[signing]`; both or neither)."""

    cert: Path | None = None
    key: Path | None = None


LOG_FORMATS = ("text", "json")


@dataclass(frozen=True)
class ObservabilityConfig:
    """Metrics endpoint and log format (`[observability]`)."""

    #: host:port of the Prometheus endpoint (plain HTTP, GET /metrics); "" = no endpoint
    metrics_listen: str = ""
    #: serve the metrics over HTTPS with this party's TLS certificate and key
    metrics_tls: bool = False
    #: "text" (one line per record) or "json" (one JSON object per line)
    log_format: str = "text"

    def __post_init__(self) -> None:
        if self.log_format not in LOG_FORMATS:
            raise ValueError(f"observability.log_format must be one of {LOG_FORMATS}, got {self.log_format!r}")
        if self.metrics_listen:
            host, sep, port = self.metrics_listen.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"observability.metrics_listen must be host:port, got {self.metrics_listen!r}")


@dataclass(frozen=True)
class RoundConfig:
    """Stage I round timing (party0 decides; party1 follows)."""

    deadline_s: float = 60.0  #: a round closes this long after it opens at the latest
    min_clients: int = 1  #: fewer agreed members than this: the round stays open past its deadline
    max_rounds: int = 0  #: stop opening rounds after this many (0: no limit)
    poll_s: float = 0.1  #: how often the coordinator looks at upload progress
    peer_timeout_s: float = 30.0  #: per-call deadline on the peer channel
    peer_retry_s: float = 0.5  #: first back-off after a failed peer call (doubles, capped at 5 s)
    #: after party0 starts or party1 answers again, a round past its deadline waits this long
    #: before it closes, so that clients retrying into it get through
    recovery_grace_s: float = 10.0
    #: "auto": party0 opens the next round as soon as the previous one commits; "on_request":
    #: only when the admin asks (AdminService.OpenRound), for an external FL server that samples clients
    opening: str = "auto"


MIN_COHORT_FLOOR = 2  #: the smallest minimum cohort an operator may configure (docs/PRIVACY.md)


@dataclass(frozen=True)
class PrivacyConfig:
    """What this party publishes (`[privacy]`; docs/PRIVACY.md, "Minimum cohort").

    Every aggregate this party helps reveal covers at least `min_cohort` clients: a Stage I
    round with a smaller agreed membership does not commit, and Stage II jobs receive it as
    their `min_cohort` parameter. Each party enforces its own value, whatever the other asks.
    The config file refuses values below MIN_COHORT_FLOOR; only code may build a smaller one."""

    min_cohort: int = 3


@dataclass(frozen=True)
class ValidationConfig:
    """Input validation (`[validation]`; docs/SERVICE.md, "Input validation").

    When enabled, every Stage I upload and every Stage II task answer is checked in 2PC
    before it is used (server.upload_check): its L2 norm within `max_norm`, its reported
    [‖g‖] and [δ] consistent. The check runs in a dealer session, so it needs `[jobs]
    dealer`; on by default whenever a dealer is configured, off only without one or with
    `enabled = false` (logged at start, metric starfish_validation_enabled = 0). Each party
    enforces its own copy."""

    enabled: bool = True
    #: bound on ‖g‖₂ of an upload; 0 = the largest the ring allows for the model
    #: (mpc.input_check.largest_norm, fixed when the model is known at StartTraining)
    max_norm: float = 0.0


@dataclass(frozen=True)
class EvaluationConfig:
    """The federated evaluation of every succeeded job (`[evaluation]`; docs/JOBS.md §7,
    server.jobs.evaluation): the remaining clients score M̂ and M_T on their own held-out
    data and answer with secret-shared counts, checked and summed in 2PC (mpc.eval_counts).
    Runs only with a dealer (`[jobs] dealer`); both parties must hold the same values."""

    enabled: bool = True
    #: how long the clients have to answer after the tasks are posted
    deadline_s: float = 120.0
    #: N: every count of an answer is at most N (a larger answer is refused)
    max_eval_samples: int = 100_000
    #: the operator's probe, passed to the clients' callback ("" = none), e.g. "class:7"
    probe: str = ""


@dataclass(frozen=True)
class LimitConfig:
    """Message and payload limits (a model of 582,026 parameters is 4.7 MB as a share)."""

    max_message_bytes: int = 4 * 1024 * 1024  #: gRPC per-message cap; larger payloads are streamed
    chunk_bytes: int = 1024 * 1024  #: size of each streamed data chunk
    max_model_params: int = 50_000_000
    max_samples: int = 1_000_000  #: largest accepted n_j (Σ n_j of a round is bounded by server.headroom)
    max_lr: float = 10.0  #: largest learning rate StartTraining accepts
    #: no round opens while the data dir has less free space (server.storage_faults; 0: no check)
    min_free_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class AdmissionConfig:
    """Per-client and per-class concurrency on the client/admin port (server.admission)."""

    max_streams_per_client: int = 4  #: open WatchTasks streams of one client
    max_requests_per_client: int = 8  #: other concurrent client calls (uploads, models, round state) of one client
    max_streams: int = 256  #: open WatchTasks streams of all clients together
    max_requests: int = 64  #: other concurrent client calls of all clients together
    admin_threads: int = 8  #: threads kept for the admin API and health checks, beyond the client classes

    @property
    def threads(self) -> int:
        """Worker threads of the client/admin port: every class at its limit still leaves `admin_threads`."""
        return self.max_streams + self.max_requests + self.admin_threads


@dataclass(frozen=True)
class PartyConfig:
    role: int
    listen: str  #: client service address (server-side TLS + tokens)
    peer_listen: str  #: peer service address (mutual TLS)
    peer_address: str  #: the other party's peer service address
    data_dir: Path
    tls: TlsConfig
    precision_bits: int = DEFAULT_PRECISION_BITS
    max_abs: float = MAX_ABS_DEFAULT
    admin_token_sha256: str = ""
    clients: dict[str, str] = field(default_factory=dict)  #: client id -> token sha256
    #: client id -> enrolled principal (organisation); a client without one is its own ([auth.principals])
    principals: dict[str, str] = field(default_factory=dict)
    rounds: RoundConfig = field(default_factory=RoundConfig)
    limits: LimitConfig = field(default_factory=LimitConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    jobs: JobConfig = field(default_factory=JobConfig)  #: Stage II job runner ([jobs])
    signing: SigningConfig = field(default_factory=SigningConfig)  #: erasure-signing identity ([signing])
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    #: operator's unlearning parameters and the bounds of admin overrides ([unlearning])
    unlearning: UnlearningPolicy = field(default_factory=UnlearningPolicy)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)  #: minimum cohort k ([privacy])
    admin_listen: str = ""  #: party0\'s admin API address ("" = none; server.admin_gate)
    #: optional distributed differential privacy ([privacy]'s DP keys; privacy.settings)
    dp: DPConfig = field(default_factory=DPConfig)
    #: input validation of uploads and task answers ([validation])
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    #: the federated evaluation of every succeeded job ([evaluation])
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)

    @property
    def name(self) -> str:
        return f"party{self.role}"


@functools.cache
def party_schema() -> Schema:
    """The one schema of a party's file (server.config_schema), with the defaults of the
    dataclasses above; docs/SERVICE.md's table is generated from it."""
    return build_party_schema(
        RoundConfig,
        PrivacyConfig,
        LimitConfig,
        AdmissionConfig,
        ObservabilityConfig,
        JobConfig,
        ValidationConfig,
        EvaluationConfig,
    )


def _require(table: dict, key: str, where: str):
    if key not in table:
        raise ConfigError(f"missing key '{key}' in [{where}]")
    return table[key]


def _path(base: Path, value: object, key: str) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"'{key}' must be a non-empty path string")
    p = Path(value)
    return p if p.is_absolute() else (base / p)


def _sub(cls, table: dict, where: str):
    known = set(cls.__dataclass_fields__)
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)} in [{where}]")
    try:
        return cls(**table)
    except TypeError as exc:
        raise ConfigError(f"bad [{where}]: {exc}") from exc


def _positive(value: object, key: str, integer: bool = False, zero_ok: bool = False) -> None:
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        what = "a non-negative" if zero_ok else "a positive"
        raise ConfigError(f"{key} must be {what} finite {'integer' if integer else 'number'}, got {value!r}")


def _check_rounds(rounds: RoundConfig) -> RoundConfig:
    for key in ("deadline_s", "poll_s", "peer_timeout_s", "peer_retry_s"):
        _positive(getattr(rounds, key), f"rounds.{key}")
    _positive(rounds.recovery_grace_s, "rounds.recovery_grace_s", zero_ok=True)
    _positive(rounds.min_clients, "rounds.min_clients", integer=True)
    _positive(rounds.max_rounds, "rounds.max_rounds", integer=True, zero_ok=True)
    if rounds.opening not in ROUND_OPENING:
        raise ConfigError(f"rounds.opening must be one of {sorted(ROUND_OPENING)}, got {rounds.opening!r}")
    return rounds


def _privacy(table: dict, jobs: JobConfig) -> tuple[PrivacyConfig, DPConfig]:
    """`[privacy]`: the minimum cohort (here) and the DP keys (`privacy.settings`); DP needs
    a dealer service, as every Stage I aggregate is then clipped in a 2PC session."""
    cohort_keys = {k: v for k, v in table.items() if k not in DP_KEYS}
    privacy = _check_privacy(_sub(PrivacyConfig, cohort_keys, "privacy"))
    try:
        dp = parse_dp_config(table)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if dp.settings is not None and not jobs.dealer:
        raise ConfigError(
            "[privacy] dp = true needs [jobs] dealer: every Stage I aggregate is clipped and noised "
            "in a 2PC session (docs/PRIVACY.md)"
        )
    return privacy, dp


def _validation(table: dict, jobs: JobConfig) -> ValidationConfig:
    """`[validation]`: on by default when a dealer is configured; `enabled = true` needs one."""
    cfg = _sub(ValidationConfig, {"enabled": bool(jobs.dealer), **table}, "validation")
    if not isinstance(cfg.enabled, bool):
        raise ConfigError(f"validation.enabled must be true or false, got {cfg.enabled!r}")
    _positive(cfg.max_norm, "validation.max_norm", zero_ok=True)
    if cfg.enabled and not jobs.dealer:
        raise ConfigError(
            "[validation] enabled = true needs [jobs] dealer: every upload is checked in a 2PC session "
            "with the dealer's correlated randomness (docs/SERVICE.md)"
        )
    return ValidationConfig(cfg.enabled, float(cfg.max_norm))


def _evaluation(table: dict) -> EvaluationConfig:
    """`[evaluation]`: a boolean switch, a positive deadline, 1 ≤ N < 2^40, a probe string."""
    cfg = _sub(EvaluationConfig, table, "evaluation")
    if not isinstance(cfg.enabled, bool):
        raise ConfigError(f"evaluation.enabled must be true or false, got {cfg.enabled!r}")
    _positive(cfg.deadline_s, "evaluation.deadline_s")
    _positive(cfg.max_eval_samples, "evaluation.max_eval_samples", integer=True)
    if cfg.max_eval_samples >= 1 << MAX_BITS:
        raise ConfigError(f"evaluation.max_eval_samples must be below 2^{MAX_BITS}, got {cfg.max_eval_samples}")
    if not isinstance(cfg.probe, str) or len(cfg.probe) > 256:
        raise ConfigError(f"evaluation.probe must be a string of at most 256 characters, got {cfg.probe!r}")
    return EvaluationConfig(cfg.enabled, float(cfg.deadline_s), cfg.max_eval_samples, cfg.probe)


def _check_privacy(privacy: PrivacyConfig) -> PrivacyConfig:
    k = privacy.min_cohort
    if isinstance(k, bool) or not isinstance(k, int) or k < MIN_COHORT_FLOOR:
        raise ConfigError(
            f"privacy.min_cohort must be an integer >= {MIN_COHORT_FLOOR}, got {k!r}: a revealed aggregate "
            "of fewer clients isolates a client's gradient (docs/PRIVACY.md)"
        )
    return privacy


def _check_limits(limits: LimitConfig, precision: int, max_abs: float) -> LimitConfig:
    """Sizes positive, chunks fit a message, and one client's n_j within the round's sample budget."""
    for key in ("max_message_bytes", "chunk_bytes", "max_model_params", "max_samples"):
        _positive(getattr(limits, key), f"limits.{key}", integer=True)
    _positive(limits.max_lr, "limits.max_lr")
    _positive(limits.min_free_bytes, "limits.min_free_bytes", integer=True, zero_ok=True)
    if limits.chunk_bytes % 8 or limits.chunk_bytes + 4096 > limits.max_message_bytes:
        raise ConfigError("limits.chunk_bytes must be a positive multiple of 8, smaller than max_message_bytes - 4096")
    budget = round_sample_budget(precision, max_abs)
    if limits.max_samples > budget:
        raise ConfigError(
            f"limits.max_samples = {limits.max_samples} exceeds the round's sample budget {budget} at "
            f"precision_bits = {precision}, max_abs = {max_abs:g}: one client's n_j·max|g| could wrap the "
            "int64 aggregate (docs/NUMERICS.md §1)"
        )
    return limits


def _check_admission(admission: AdmissionConfig) -> AdmissionConfig:
    for key in AdmissionConfig.__dataclass_fields__:
        _positive(getattr(admission, key), f"admission.{key}", integer=True)
    return admission


def _principals(table: dict, clients: dict[str, str]) -> dict[str, str]:
    """`[auth.principals]`: client id -> the principal (organisation) it was enrolled for."""
    if not isinstance(table, dict):
        raise ConfigError("[auth.principals] must be a table of client id = principal name")
    for cid, principal in table.items():
        if cid not in clients:
            raise ConfigError(f"[auth.principals] names client {cid!r}, which has no credential in [auth.clients]")
        if not isinstance(principal, str) or not CLIENT_ID_RE.match(principal):
            raise ConfigError(
                f"principal of client {cid!r} must be letters, digits, '_ . -' (at most 64), got {principal!r}"
            )
    return dict(table)


def _auth(auth: dict) -> tuple[dict[str, str], str]:
    """`[auth]`: client id -> token digest, and the admin token digest."""
    clients = dict(auth.get("clients", {}))
    for cid, digest in clients.items():
        if not CLIENT_ID_RE.match(cid):
            raise ConfigError(f"invalid client id {cid!r} in [auth.clients]")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ConfigError(f"credential of client {cid!r} must be a sha256 hex digest")
    admin = auth.get("admin_token_sha256", "")
    if admin and not re.fullmatch(r"[0-9a-f]{64}", admin):
        raise ConfigError("auth.admin_token_sha256 must be a sha256 hex digest")
    return clients, admin


def _check_schema(data: dict) -> None:
    """Every key and section known (server.config_schema), every address a valid host:port,
    before any value is read or anything binds."""
    try:
        party_schema().check(data)
        for key in ("listen", "peer_listen", "peer_address"):
            if key in data:
                address(data[key], key)
        if data.get("admin_listen", ""):
            address(data["admin_listen"], "admin_listen")
            if data.get("role") != 0:
                raise SchemaError("admin_listen: only party0 serves the admin API (party1 has none)")
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None


def _tls(data: dict, base: Path, role: int) -> TlsConfig:
    """`[tls]`: paths resolved against `base`; the peer's name defaults to party<1-role>."""
    tls_t = _require(data, "tls", "top level")
    return TlsConfig(
        ca=_path(base, _require(tls_t, "ca", "tls"), "tls.ca"),
        cert=_path(base, _require(tls_t, "cert", "tls"), "tls.cert"),
        key=_path(base, _require(tls_t, "key", "tls"), "tls.key"),
        peer_name=str(tls_t.get("peer_name", f"party{1 - role}")),
    )


def _fixed_point(fp: dict) -> tuple[int, float]:
    """`[fixed_point]`: (precision_bits f in 1..40, max_abs > 0)."""
    precision = fp.get("precision_bits", DEFAULT_PRECISION_BITS)
    if not isinstance(precision, int) or not 1 <= precision <= 40:
        raise ConfigError(f"fixed_point.precision_bits must be an int in [1, 40], got {precision!r}")
    max_abs = float(fp.get("max_abs", MAX_ABS_DEFAULT))
    if not (math.isfinite(max_abs) and max_abs > 0):
        raise ConfigError(f"fixed_point.max_abs must be a positive finite number, got {max_abs!r}")
    return precision, max_abs


def parse_config(data: dict, base: Path) -> PartyConfig:
    """Validate a parsed TOML document; relative paths are resolved against `base`."""
    _check_schema(data)
    role = _require(data, "role", "top level")
    if role not in (0, 1):
        raise ConfigError(f"role must be 0 or 1, got {role!r}")
    tls = _tls(data, base, role)
    precision, max_abs = _fixed_point(data.get("fixed_point", {}))
    clients, admin = _auth(data.get("auth", {}))
    principals = _principals(data.get("auth", {}).get("principals", {}), clients)
    rounds = _check_rounds(_sub(RoundConfig, data.get("rounds", {}), "rounds"))
    limits = _check_limits(_sub(LimitConfig, data.get("limits", {}), "limits"), precision, max_abs)
    admission = _check_admission(_sub(AdmissionConfig, data.get("admission", {}), "admission"))
    try:
        jobs = _sub(JobConfig, data.get("jobs", {}), "jobs")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    signing = _signing(data.get("signing", {}), base)
    privacy, dp = _privacy(data.get("privacy", {}), jobs)
    validation = _validation(data.get("validation", {}), jobs)
    evaluation = _evaluation(data.get("evaluation", {}))
    try:
        unlearning = parse_policy(data.get("unlearning", {}))
    except PolicyError as exc:
        raise ConfigError(str(exc)) from exc
    try:
        observability = _sub(ObservabilityConfig, data.get("observability", {}), "observability")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    return PartyConfig(
        role=role,
        listen=str(_require(data, "listen", "top level")),
        peer_listen=str(_require(data, "peer_listen", "top level")),
        peer_address=str(_require(data, "peer_address", "top level")),
        admin_listen=str(data.get("admin_listen", "")),
        data_dir=_path(base, _require(data, "data_dir", "top level"), "data_dir"),
        tls=tls,
        precision_bits=precision,
        max_abs=max_abs,
        admin_token_sha256=admin,
        clients=clients,
        principals=principals,
        rounds=rounds,
        limits=limits,
        admission=admission,
        jobs=jobs,
        signing=signing,
        observability=observability,
        unlearning=unlearning,
        privacy=privacy,
        dp=dp,
        validation=validation,
        evaluation=evaluation,
    )


def _signing(table: dict, base: Path) -> SigningConfig:
    unknown = set(table) - {"cert", "key"}
    if unknown:
        raise ConfigError(f"unknown key(s) {sorted(unknown)} in [signing]")
    if not table:
        return SigningConfig()
    if set(table) != {"cert", "key"}:
        raise ConfigError("[signing] needs both 'cert' and 'key' (or neither)")
    return SigningConfig(_path(base, table["cert"], "signing.cert"), _path(base, table["key"], "signing.key"))


def load_config(path: str | Path) -> PartyConfig:
    """Read and validate a party's TOML configuration file."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {p} does not exist") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from exc
    try:
        return parse_config(data, p.resolve().parent)
    except ConfigError:
        raise
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError) as exc:
        # a table where a value belongs, or a value where a table belongs: refused, never a traceback
        raise ConfigError(f"config file {p}: a key holds a value of the wrong type or shape: {exc}") from None
