"""The MPC plane: every byte between party0, party1 and the dealer, authenticated and encrypted.

* `tls` — TLS 1.3 contexts from the deployment's certificates, identity checks;
  `certs` — issuing the CA and the operators' certificates;
* `channel` — framed messages on TLS connections; `rendezvous` — party 0's listener,
  party 1's connection, hellos; `communicator` — CrypTen's Communicator on a channel;
  `gloo` — the unencrypted reference transport (loopback measurements only);
* `prg` — AES-256-CTR streams keyed by the dealer; `dealer_ops` — the dealer's request
  kinds (registry); `dealer_service` / `dealer_config` — the dealer service and its TOML;
  `dealer_client` — a party's link to it; `provider` — CrypTen's tuple provider on it (the
  Beaver triples); `fixed_beaver` — the fixed-operand Beaver products that extend them, on
  this party's raw ring shares with the dealer's `matmul_fixed` / `dot_fixed`.

Design, configuration and operations: docs/DEPLOY.md.
"""
