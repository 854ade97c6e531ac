"""One client's sharing of (g, ‖g‖, δ) for one round or task: both halves and their binding.

A sharing is made once per (client, target) and then only resent (client_sdk.outbox keeps
it on disk), so every retry carries the same two halves and the same binding.

Half p holds [ḡ]_p (or, seed-compressed, the 33-byte tagged seed of r; mpc.masks),
[‖g‖]_p and [δ]_p, plus the nonce of its commitment (proto.binding). With
`compress_mask` one party gets x̄ − r in full and the other only the seed of r; which
party gets the seed is spread over clients and targets (crc32 of the key), so both parties
carry half of the full shares.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass, field

import numpy as np

from client_sdk import errors
from client_sdk.stats import l2_norm, tolerance_threshold
from mpc.fixedpoint import encode, share, to_wire
from mpc.masks import seeded_share
from proto import binding
from proto.starfish.v1 import common_pb2
from proto.wire import sha256_hex


@dataclass(frozen=True)
class Half:
    """Party p's half of a sharing."""

    data: bytes  #: gradient share, little-endian int64 (empty when `seed` is set)
    seed: bytes  #: tagged mask seed of a seed-compressed share (empty when `data` is set)
    norm: bytes  #: [‖g‖]_p, 8 bytes
    delta: bytes  #: [δ]_p, 8 bytes
    nonce: bytes  #: nonce_p of the commitment c_p
    content_sha256: str = field(init=False, repr=False, compare=False)
    """sha256 of the share bytes (of the seed when set), computed once when the half is made
    (not a cached_property: that holds one lock for all instances while it hashes, so the
    halves of clients sharing a process would be hashed one at a time)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "content_sha256", sha256_hex(self.seed or self.data))


@dataclass(frozen=True)
class Sharing:
    target: str  #: proto.binding.round_target / task_target
    n_samples: int
    model_hash: str
    num_params: int
    sharing_id: bytes
    halves: tuple[Half, Half]
    commitments: tuple[bytes, bytes]
    fingerprint: str  #: of (g, n_j, model) under the sharing id: tells a resubmission of the same values

    @property
    def binding_sha256(self) -> str:
        return binding.binding_digest(self.sharing_id, self.commitments)

    def target_fields(self) -> dict:
        kind, _, value = self.target.partition(":")
        return {"round": int(value)} if kind == "round" else {"task_id": value}

    def header(self, party: int) -> common_pb2.UploadHeader:
        """The UploadHeader of party p's half (no data chunks follow when it carries a seed)."""
        half = self.halves[party]
        return common_pb2.UploadHeader(
            n_samples=self.n_samples,
            shape=[self.num_params],
            dtype="int64",
            model_hash=self.model_hash,
            norm_share=common_pb2.Tensor(shape=[1], dtype="int64", data=half.norm),
            delta_share=common_pb2.Tensor(shape=[1], dtype="int64", data=half.delta),
            mask_seed=half.seed,
            content_sha256=half.content_sha256,
            binding=common_pb2.ShareBinding(
                sharing_id=self.sharing_id, commitments=list(self.commitments), nonce=half.nonce
            ),
            **self.target_fields(),
        )


def fingerprint(sharing_id: bytes, gradient: np.ndarray, n_samples: int, model_hash: str) -> str:
    """sha256 over the sharing id, n_j, the model hash and g as float64: the same values give the
    same fingerprint under one sharing id (salted, so it is no dictionary key for g)."""
    g = np.ascontiguousarray(np.asarray(gradient, dtype="<f8").reshape(-1))
    h = hashlib.sha256(sharing_id)
    h.update(int(n_samples).to_bytes(8, "little") + model_hash.encode("ascii"))
    h.update(memoryview(g).cast("B"))  # the array's bytes, hashed in place
    return h.hexdigest()


def checked_gradient(gradient: np.ndarray) -> np.ndarray:
    """g as flat float64 after the checks made before anything is written or sent."""
    g = np.asarray(gradient)
    if g.dtype.kind != "f":
        raise errors.EncodingError(f"gradient must be a floating-point array, got dtype {g.dtype}")
    g = g.astype(np.float64, copy=False).reshape(-1)
    if g.size and not (math.isfinite(np.max(g)) and math.isfinite(np.min(g))):  # NaN propagates to both
        raise errors.EncodingError(f"gradient has {int(np.sum(~np.isfinite(g)))} non-finite value(s); nothing sent")
    return g


def make_sharing(
    client_id: str,
    target: str,
    gradient: np.ndarray,
    n_samples: int,
    model_hash: str,
    encoding: tuple[int, float],
    alpha: float,
    compress_mask: bool,
) -> Sharing:
    """Encode and share (g, ‖g‖, δ) with CSPRNG masks and bind the two halves (proto.binding)."""
    precision, max_abs = encoding
    g = checked_gradient(gradient)
    norms = share(np.array([l2_norm(g)]), precision, max_abs)
    deltas = share(np.array([tolerance_threshold(g, alpha)]), precision, max_abs)
    if compress_mask:
        full, seed = seeded_share(encode(g, precision, max_abs))
        grads = [(b"", seed), (b"", seed)]
        grads[1 - zlib.crc32(f"{client_id}/{target}".encode()) % 2] = (to_wire(full), b"")
    else:
        g0, g1 = share(g, precision, max_abs)
        grads = [(to_wire(g0), b""), (to_wire(g1), b"")]
    halves = tuple(
        Half(grads[p][0], grads[p][1], to_wire(norms[p]), to_wire(deltas[p]), binding.new_nonce()) for p in (0, 1)
    )
    return assemble(target, n_samples, model_hash, (halves[0], halves[1]), g)


def assemble(target: str, n_samples: int, model_hash: str, halves: tuple[Half, Half], gradient: np.ndarray) -> Sharing:
    """Bind two halves into a sharing: a fresh sharing id and the commitments c_0, c_1 (proto.binding)."""
    num_params = int(np.asarray(gradient).size)
    sharing_id = binding.new_sharing_id()
    commitments = tuple(
        binding.commitment(
            halves[p].nonce,
            sharing_id,
            binding.HalfFacts(
                p,
                target,
                n_samples,
                model_hash,
                num_params,
                halves[p].content_sha256,
                halves[p].norm,
                halves[p].delta,
            ),
        )
        for p in (0, 1)
    )
    return Sharing(
        target,
        int(n_samples),
        model_hash,
        num_params,
        sharing_id,
        halves,
        (commitments[0], commitments[1]),
        fingerprint(sharing_id, gradient, n_samples, model_hash),
    )
