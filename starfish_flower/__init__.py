"""Starfish for Flower: a secret-shared history and unlearning for an existing Flower app.

Client side: add `StarfishMod` to the `ClientApp`'s mods. Server side: use
`StarfishFedAvg` in the `ServerApp` instead of Flower's `FedAvg`; its `unlearn` files an
unlearning request and runs the clients the job asks for. Both talk to the parties through
the Starfish SDK (`client_sdk`); see docs/FLOWER.md.
"""

from starfish_flower import offline  # noqa: F401  (before flwr: no telemetry leaves the machine)
from starfish_flower.fedavg_strategy import StarfishFedAvg, UnlearnOutcome
from starfish_flower.mod import StarfishMod, request_unlearning
from starfish_flower.parties import Parties, identity_from_credentials, identity_from_node_config

__all__ = [
    "Parties",
    "StarfishFedAvg",
    "StarfishMod",
    "UnlearnOutcome",
    "identity_from_credentials",
    "identity_from_node_config",
    "request_unlearning",
]
