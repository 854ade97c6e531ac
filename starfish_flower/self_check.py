"""The forgotten client's self-check from a Flower app (`client_sdk.self_check`).

A Flower ClientApp evaluates an `ArrayRecord` (its `state_dict` form); the SDK's self-check
scores flat parameter vectors. `flat_evaluate(template, evaluate_arrays)` turns the app's
own evaluation into the SDK's callback (`starfish_flower.arrays.unflatten`: the template's
keys, shapes and dtypes), so the client can run

    self_check(client, flat_evaluate(template, evaluate_arrays), statement=check.statement)

on its own data, with the certificate `starfish_flower.certificates.verified` returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from flwr.app import ArrayRecord

from client_sdk.self_check import Evaluate
from starfish_flower.arrays import unflatten


def flat_evaluate(template: ArrayRecord, evaluate_arrays: Callable[[ArrayRecord], Mapping[str, float]]) -> Evaluate:
    """`evaluate(flat params) = evaluate_arrays(unflatten(flat params, template))`."""

    def evaluate(params: np.ndarray) -> Mapping[str, float]:
        return evaluate_arrays(unflatten(params, template))

    return evaluate
