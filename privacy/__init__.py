"""Differential privacy of the service, importable without torch (docs/PRIVACY.md).

`settings.py` (`[privacy]`'s DP keys, DPSettings), `release_log.py` (one published aggregate,
Release), `distributed.py` (PrivateAggregator: SecClip, the weighted sum, the distributed
noise), `adaptive.py` (FedADP's budget schedule and its client-side Gaussian mechanism),
`accountant.py` (ε per client, Opacus RDP). torch and Opacus are imported only inside the
functions that touch a tensor or the accountant, so a party reads its configuration
without loading either.
"""
