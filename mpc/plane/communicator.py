"""`PlaneCommunicator`: CrypTen's `Communicator` for two parties over a `Channel`.

CrypTen's protocols call `crypten.communicator.get()` for every exchange; during a
session that returns this object instead of CrypTen's torch.distributed communicator, so
shares, masked openings and comparisons travel over the authenticated TLS lanes of
`mpc.plane.channel` — no torch.distributed, gloo or TCPStore is involved.

With two parties every collective is one exchange with the other party:

* all_reduce / reduce: send my tensor, receive theirs, combine (SUM: ring addition of
  int64 shares, wrapping mod 2^64; BXOR: binary shares);
* all_gather / gather: both tensors, in rank order; broadcast / scatter: from `src`;
* send / recv / isend / irecv: one tensor; barrier: an empty tensor each way;
* every call returns only once its own sends were handed to the kernel (`Channel.drain`),
  so the caller may reuse its tensors at once; the sends still overlap the receive;
* send_obj / recv_obj / broadcast_obj: small objects (None, bool, int, float, str,
  lists, tuples, torch.Size) as JSON — never pickle.

The byte and round counters are CrypTen's own (`crypten.communicator._logging`), so the
cost ledger counts exactly what it counted over gloo.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed import ReduceOp

from mpc.crypten_loader import load_crypten
from mpc.plane.channel import Channel

load_crypten()
import crypten.communicator  # noqa: E402
from crypten.communicator.communicator import Communicator, _logging  # noqa: E402

WORLD_SIZE = 2
_CRYPTEN_COMMUNICATOR = crypten.communicator.DistributedCommunicator


class _Done:
    """The handle of a completed send."""

    def wait(self) -> None:
        return None

    def is_completed(self) -> bool:
        return True


class _PendingRecv:
    """The handle of an irecv: the tensor is filled when `wait()` is called."""

    def __init__(self, comm: PlaneCommunicator, tensor: torch.Tensor) -> None:
        self.comm, self.tensor, self.done = comm, tensor, False

    def wait(self) -> None:
        if not self.done:
            self.comm._recv_inplace(self.tensor)
            self.done = True

    def is_completed(self) -> bool:
        return self.done


def _combine(mine: torch.Tensor, theirs: torch.Tensor, op: Any) -> torch.Tensor:
    if op == ReduceOp.SUM:
        return mine + theirs
    if op == ReduceOp.BXOR:
        return mine ^ theirs
    raise ValueError(f"the two-party communicator supports SUM and BXOR reductions, not {op}")


def encode_obj(obj: Any) -> Any:
    """JSON-ready form of a small object (see the module doc); anything else is refused."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, torch.Size):
        return {"size": list(obj)}
    if isinstance(obj, tuple):
        return {"tuple": [encode_obj(x) for x in obj]}
    if isinstance(obj, list):
        return [encode_obj(x) for x in obj]
    raise TypeError(f"cannot send a {type(obj).__name__} over the MPC plane (no pickling)")


def decode_obj(data: Any) -> Any:
    if isinstance(data, list):
        return [decode_obj(x) for x in data]
    if isinstance(data, dict):
        if set(data) == {"size"}:
            return torch.Size(int(x) for x in data["size"])
        if set(data) == {"tuple"}:
            return tuple(decode_obj(x) for x in data["tuple"])
        raise ValueError(f"unknown object encoding {sorted(data)}")
    return data


class PlaneCommunicator(Communicator):
    """One party's end of a two-party session (see the module doc)."""

    BYTES_PER_ELEMENT = 8
    instance: PlaneCommunicator | None = None

    def __init__(self, rank: int, channel: Channel) -> None:
        if rank not in (0, 1):
            raise ValueError(f"rank must be 0 or 1, got {rank}")
        self.rank = rank
        self.world_size = WORLD_SIZE
        self.channel = channel
        self._name = f"rank{rank}"
        self.reset_communication_stats()

    # ---------------------------------------------------------------- CrypTen's class API
    @classmethod
    def is_initialized(cls) -> bool:
        return cls.instance is not None

    @classmethod
    def get(cls) -> PlaneCommunicator | None:
        return cls.instance

    @classmethod
    def initialize(cls, rank: int, world_size: int, init_ttp: bool = False) -> None:
        raise RuntimeError("the MPC plane is opened by mpc.session.Session, not by crypten.init()")

    @classmethod
    def shutdown(cls) -> None:
        if cls.instance is not None:
            cls.instance.channel.close()
        cls.instance = None

    # ---------------------------------------------------------------- helpers
    @property
    def other(self) -> int:
        return 1 - self.rank

    def _check_peer(self, party: int | None) -> None:
        if party is not None and party != self.other:
            raise ValueError(f"party {self.rank} can only exchange with party {self.other}, not {party}")

    def _recv_inplace(self, t: torch.Tensor) -> torch.Tensor:
        if t.is_contiguous():
            return self.channel.recv_into(t)
        return t.copy_(self.channel.recv_like(t))

    def _exchange(self, t: torch.Tensor) -> torch.Tensor:
        self.channel.send_tensor(t)
        theirs = self.channel.recv_like(t)
        self.channel.drain()
        return theirs

    # ---------------------------------------------------------------- point to point
    @_logging
    def send(self, tensor: torch.Tensor, dst: int) -> None:
        self._check_peer(dst)
        self.channel.send_tensor(tensor)
        self.channel.drain()

    @_logging
    def recv(self, tensor: torch.Tensor, src: int | None = None) -> torch.Tensor:
        self._check_peer(src)
        return self.channel.recv_like(tensor)

    @_logging
    def isend(self, tensor: torch.Tensor, dst: int) -> _Done:
        self._check_peer(dst)
        self.channel.send_tensor(tensor)
        self.channel.drain()
        return _Done()

    @_logging
    def irecv(self, tensor: torch.Tensor, src: int | None = None) -> _PendingRecv:
        self._check_peer(src)
        return _PendingRecv(self, tensor)

    # ---------------------------------------------------------------- collectives
    @_logging
    def scatter(self, scatter_list: list[torch.Tensor], src: int, size: Any = None, device: Any = None) -> torch.Tensor:
        if src == self.rank:
            self.channel.send_tensor(scatter_list[self.other])
            self.channel.drain()
            return scatter_list[self.rank]
        shape = size if size is not None else scatter_list[self.rank].size()
        return self.channel.recv_into(torch.empty(shape, dtype=torch.long))

    @_logging
    def reduce(self, input: Any, dst: int, op: Any = ReduceOp.SUM, batched: bool = False) -> Any:
        tensors = input if batched else [input]
        if dst != self.rank:
            for t in tensors:
                self.channel.send_tensor(t)
            self.channel.drain()
            return None
        out = [_combine(t, self.channel.recv_like(t), op) for t in tensors]
        return out if batched else out[0]

    @_logging
    def all_reduce(self, input: Any, op: Any = ReduceOp.SUM, batched: bool = False) -> Any:
        tensors = input if batched else [input]
        for t in tensors:
            self.channel.send_tensor(t)
        out = [_combine(t, self.channel.recv_like(t), op) for t in tensors]
        self.channel.drain()
        return out if batched else out[0]

    @_logging
    def gather(self, tensor: torch.Tensor, dst: int) -> list[torch.Tensor | None]:
        if dst != self.rank:
            self.channel.send_tensor(tensor)
            self.channel.drain()
            return [None]
        theirs = self.channel.recv_like(tensor)
        return [tensor, theirs] if self.rank == 0 else [theirs, tensor]

    @_logging
    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        theirs = self._exchange(tensor)
        return [tensor.clone(), theirs] if self.rank == 0 else [theirs, tensor.clone()]

    @_logging
    def broadcast(self, input: Any, src: int, group: Any = None, batched: bool = False) -> Any:
        for t in input if batched else [input]:
            if src == self.rank:
                self.channel.send_tensor(t)
            else:
                self._recv_inplace(t)
        self.channel.drain()
        return input

    @_logging
    def barrier(self) -> None:
        self._exchange(torch.zeros(0, dtype=torch.long))

    # ---------------------------------------------------------------- small objects
    @_logging
    def send_obj(self, obj: Any, dst: int, group: Any = None) -> None:
        self._check_peer(dst)
        self.channel.send_json({"obj": encode_obj(obj)})

    @_logging
    def recv_obj(self, src: int, group: Any = None) -> Any:
        self._check_peer(src)
        return decode_obj(self.channel.recv_json().get("obj"))

    @_logging
    def broadcast_obj(self, obj: Any, src: int, group: Any = None) -> Any:
        if src == self.rank:
            self.channel.send_json({"obj": encode_obj(obj)})
            return obj
        return decode_obj(self.channel.recv_json().get("obj"))

    # ---------------------------------------------------------------- identity
    def get_world_size(self) -> int:
        return self.world_size

    def get_rank(self) -> int:
        return self.rank

    def set_name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError("party name must be a string")
        self._name = name

    def get_name(self) -> str:
        return self._name


def install(comm: PlaneCommunicator | None) -> None:
    """Route `crypten.communicator.get()` to `comm`; None restores CrypTen's own communicator.

    CrypTen's module-level `get()`, `is_initialized()` and `uninit()` look the class up by
    the name `DistributedCommunicator` at each call, so rebinding that name is enough."""
    if comm is None:
        crypten.communicator.DistributedCommunicator = _CRYPTEN_COMMUNICATOR
        PlaneCommunicator.instance = None
        return
    PlaneCommunicator.instance = comm
    crypten.communicator.DistributedCommunicator = PlaneCommunicator
