"""Parsing and checking a streamed share upload before anything is stored.

Checks (each failure is INVALID_ARGUMENT with a message naming the problem):
header first and only once; dtype "int64"; shape equal to (m,) of the round's model;
total bytes exactly 8·m (reading stops as soon as more arrive), or instead a 33-byte
tagged mask seed (`mpc.masks.seed_key`; the retired SHAKE-256 seed is refused) and no
data; sha256 of the bytes (or seed) equal to the declared content hash; norm and δ
shares of shape (1,), int64, 8 bytes; 1 ≤ n_j ≤ limits.max_samples; and the half
matches the commitment of this party in the upload's share binding (proto.binding).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from mpc.masks import MaskSeedError, seed_key
from proto import binding
from proto.wire import StreamError, read_payload, sha256_hex, split_header
from server.config import LimitConfig


class UploadError(ValueError):
    """The upload is malformed; nothing was stored."""


@dataclass(frozen=True)
class ParsedUpload:
    header: object  #: common_pb2.UploadHeader
    gradient: np.ndarray | None  #: the streamed share, or None when a mask seed was sent
    mask_seed: bytes | None  #: tagged seed of a seed-compressed mask share (mpc.masks)
    norm: np.ndarray
    delta: np.ndarray


def read_header(stream: Iterable) -> tuple[object, Iterable]:
    """The upload's header (it must come first) and the rest of the stream."""
    try:
        return split_header(stream, "an upload")
    except StreamError as exc:
        raise UploadError(str(exc)) from None


def _scalar_share(tensor, what: str) -> np.ndarray:
    if tensor.dtype != "int64" or list(tensor.shape) != [1] or len(tensor.data) != 8:
        raise UploadError(
            f"{what} share must be one int64 (shape [1], 8 bytes); got dtype "
            f"{tensor.dtype!r}, shape {list(tensor.shape)}, {len(tensor.data)} bytes"
        )
    return np.frombuffer(tensor.data, dtype="<i8").astype(np.int64)


def read_body(header, rest: Iterable, num_params: int, limits: LimitConfig) -> ParsedUpload:
    """Check the header against the model size, then read exactly 8·m bytes of share."""
    if header.dtype != "int64":
        raise UploadError(f"gradient share dtype must be 'int64', got {header.dtype!r}")
    if list(header.shape) != [num_params]:
        raise UploadError(f"gradient share shape {list(header.shape)} does not match the model's [{num_params}]")
    if not 1 <= header.n_samples <= limits.max_samples:
        raise UploadError(f"n_samples must be in [1, {limits.max_samples}], got {header.n_samples}")
    norm = _scalar_share(header.norm_share, "norm")
    delta = _scalar_share(header.delta_share, "delta")
    if header.mask_seed:
        try:
            seed_key(header.mask_seed)
        except MaskSeedError as exc:
            raise UploadError(str(exc)) from None
        if any(True for _ in rest):
            raise UploadError("an upload with a mask seed carries no share data")
        if sha256_hex(header.mask_seed) != header.content_sha256:
            raise UploadError("mask seed does not match the declared content_sha256")
        return ParsedUpload(header, None, bytes(header.mask_seed), norm, delta)
    expected = 8 * num_params
    try:
        buf = read_payload(rest, expected, f"gradient share of shape [{num_params}]")
    except StreamError as exc:
        raise UploadError(str(exc)) from None
    if len(buf) != expected:
        raise UploadError(f"gradient share has {len(buf)} bytes, expected {expected} for shape [{num_params}]")
    if sha256_hex(buf) != header.content_sha256:
        raise UploadError("gradient share bytes do not match the declared content_sha256 (corrupted in transit?)")
    grad = np.frombuffer(buf, dtype="<i8")  # a view: the store writes these bytes without another copy
    return ParsedUpload(header, grad, None, norm, delta)


def check_binding(header, party: int, num_params: int) -> str:
    """Verify party p's commitment in the upload's binding against the half received (after
    `read_body` checked the content hash); returns the binding digest stored with the upload."""
    if not header.HasField("binding"):
        raise UploadError("upload carries no share binding (sharing id and commitments); update the client SDK")
    target = header.WhichOneof("target")
    half = binding.HalfFacts(
        party=party,
        target=binding.round_target(header.round) if target == "round" else binding.task_target(header.task_id),
        n_samples=int(header.n_samples),
        model_hash=header.model_hash,
        num_params=num_params,
        content_sha256=header.content_sha256,
        norm_share=bytes(header.norm_share.data),
        delta_share=bytes(header.delta_share.data),
    )
    b = header.binding
    try:
        return binding.verify(bytes(b.sharing_id), [bytes(c) for c in b.commitments], bytes(b.nonce), half)
    except binding.BindingError as exc:
        raise UploadError(str(exc)) from None
