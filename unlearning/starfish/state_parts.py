"""The parts every resumable state (Starfish, FedRecover, Crab) stores alike.

Each state is persisted as three parts without pickle (`unlearning.strategy.ResumableState`);
besides its own fields, every one of them stores

* in `public_json()`: the run log (`run_log.StarfishLog`) and the pending release of the
  release rule (`release.PendingRelease`); the baselines also a header naming the strategy
  and the layout's version;
* in `public_tensors()`: the public model M̂_t (read back as float64);
* in `secrets()`: the held update [U] while the release rule keeps one secret.

`reading(label)` turns a missing part (KeyError) or a part of the wrong type (TypeError)
into the one `ValueError` a strategy's `restore_state` reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from mpc.backend import Secret
from unlearning.starfish.release import PendingRelease
from unlearning.starfish.run_log import StarfishLog


def header(strategy: str, version: int) -> dict[str, Any]:
    """The public JSON's header: which strategy's state, in which layout."""
    return {"version": version, "strategy": strategy}


def check_header(public: Mapping[str, Any], strategy: str, version: int, label: str) -> None:
    """Refuse (ValueError) a state of another strategy or layout version."""
    if public.get("version") != version or public.get("strategy") != strategy:
        raise ValueError(f"not a {label} state of version {version}")


def release_json(log: StarfishLog, pending: PendingRelease) -> dict[str, Any]:
    """The run log and the pending release, JSON-ready."""
    return {"log": log.to_json(), "pending": pending.to_json()}


def held_secret(held: Secret | None) -> dict[str, Secret]:
    """The held update [U] as a secret part (none when nothing is held)."""
    return {} if held is None else {"held": held}


def key_secret(noise_key: Secret | None) -> dict[str, Secret]:
    """This party's anchored-noise key as a secret part (none before one was drawn)."""
    return {} if noise_key is None else {"noise_key": noise_key}


def restore_release(
    public: Mapping[str, Any], secrets: Mapping[str, Secret]
) -> tuple[StarfishLog, PendingRelease, Secret | None]:
    """The run log, the pending release and the held update, which a state with pending
    steps must carry (KeyError when it does not)."""
    pending = PendingRelease.from_json(public["pending"])
    held = secrets["held"] if pending.steps else None
    return StarfishLog.from_json(public["log"]), pending, held


def public_model(tensors: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """M̂_t from the public tensors, as an independent float64 copy."""
    return tensors["model"].to(torch.float64).clone()


@contextmanager
def reading(label: str) -> Iterator[None]:
    """Rebuild a `label` state inside: a missing part or a malformed one is a ValueError."""
    try:
        yield
    except KeyError as exc:
        raise ValueError(f"incomplete {label} state: missing {exc}") from None
    except TypeError as exc:
        raise ValueError(f"malformed {label} state: {exc}") from None
