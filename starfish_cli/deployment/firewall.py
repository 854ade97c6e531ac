"""An operator host's nftables ruleset, rendered from the deployment description.

One table, `inet starfish`, replaced as a whole on each load: inbound is dropped except
loopback, established connections, the operator's administrative ports (`[admin] ports`,
and on party0's host its admin API port, from `[admin] sources` if given) and the service
ports of its role, each from the hosts
that use it (docs/DEPLOY.md §2). Administrative access lives in the same table because
nftables drops a packet that any table's base chain drops: an accept in another table does
not let it through.
"""

from __future__ import annotations

from starfish_cli.deployment.spec import Spec


def _set(items: list[str] | tuple) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _service_rules(spec: Spec, role: str) -> list[str]:
    p0, p1, dealer = spec.party0, spec.party1, spec.dealer
    if role == "party0":
        return [
            f'tcp dport {p0.client_port} accept comment "client API"',
            f'ip saddr {p1.address} tcp dport {_set([p0.peer_port, p0.mpc_port])} accept comment "party1: peer, MPC"',
        ]
    if role == "party1":
        return [
            f'tcp dport {p1.client_port} accept comment "client API"',
            f'ip saddr {p0.address} tcp dport {p1.peer_port} accept comment "party0: peer"',
        ]
    return [f'ip saddr {_set([p0.address, p1.address])} tcp dport {dealer.port} accept comment "parties"']


def ruleset(spec: Spec, role: str) -> str:
    """The nftables file of `role`'s host (load with `nft -f`)."""
    ports = [*spec.admin_ports, *([spec.party0.admin_port] if role == "party0" else [])]
    admin = f'tcp dport {_set(ports)} accept comment "operator administration"'
    if spec.admin_sources:
        admin = f"ip saddr {_set(spec.admin_sources)} {admin}"
    rules = [
        'iif "lo" accept',
        "ct state established,related accept",
        "ct state invalid drop",
        admin,
        *_service_rules(spec, role),
    ]
    body = "\n".join(f"\t\t{r}" for r in rules)
    return (
        "#!/usr/sbin/nft -f\n"
        f"# {role}'s host firewall, rendered from the deployment description (starfish deploy render).\n"
        "# Replaces only the table inet starfish; administrative access is in this same table.\n"
        "table inet starfish\ndelete table inet starfish\ntable inet starfish {\n"
        "\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n"
        f"{body}\n\t}}\n}}\n"
    )
