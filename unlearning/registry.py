"""Strategy names → `Strategy` classes, the one list the CLI, simulator and service use.

Classes are imported lazily from a dotted path, so importing the registry is cheap and a
strategy whose module is missing (or fails to import) gives a clear `UnlearningError`
when asked for, instead of breaking every other strategy.

    from unlearning import registry
    strategy = registry.create("fedrecover")
    registry.names()  # ['starfish', 'retrain', 'random', 'federaser', 'fedrecover', 'crab', 'fedadp', 'puf']
"""

from __future__ import annotations

import importlib

from unlearning.errors import UnlearningError
from unlearning.strategy import Strategy

#: name → "module:Class"; the order is the order of the paper's comparison (Starfish §VI-A)
STRATEGIES: dict[str, str] = {
    "starfish": "unlearning.starfish.driver:StarfishStrategy",
    "retrain": "unlearning.baselines.retrain:RetrainStrategy",
    "random": "unlearning.baselines.random_selection:RandomSelectionStrategy",
    "federaser": "unlearning.baselines.federaser:FedEraserStrategy",
    "fedrecover": "unlearning.baselines.fedrecover:FedRecoverStrategy",
    "crab": "unlearning.baselines.crab:CrabStrategy",
    "fedadp": "unlearning.baselines.fedadp:FedADPStrategy",
    "puf": "unlearning.baselines.puf:PUFStrategy",
}


def names() -> list[str]:
    """Every registered strategy name."""
    return list(STRATEGIES)


def strategy_class(name: str) -> type[Strategy]:
    """The class registered under `name` (imported on first use)."""
    try:
        target = STRATEGIES[name]
    except KeyError:
        raise UnlearningError(f"unknown strategy {name!r}; known: {names()}") from None
    module_name, class_name = target.split(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UnlearningError(f"strategy {name!r} is not available: {exc}") from exc
    if not (isinstance(cls, type) and issubclass(cls, Strategy)):
        raise UnlearningError(f"{target} is not a Strategy")
    return cls


def create(name: str) -> Strategy:
    """A fresh instance of the strategy registered under `name`."""
    return strategy_class(name)()


def requires_plaintext(name: str) -> bool:
    """Whether the strategy refuses a secure (2PC) backend."""
    return bool(strategy_class(name).requires_plaintext)


def needs_probe(name: str) -> bool:
    """Whether the strategy needs a `ModelProbe` in its context."""
    return bool(strategy_class(name).needs_probe)


def job_names() -> list[str]:
    """The strategies the 2PC job runtime can run (`Strategy.runs_as_job`), in registry order."""
    return [name for name in STRATEGIES if strategy_class(name).runs_as_job()]
