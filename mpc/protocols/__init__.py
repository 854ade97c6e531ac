"""Composite two-party protocols written once against the primitives of `mpc.backend.Backend`.

Each module realises one protocol of the Starfish paper (algorithm and line cited in its
docstring). Because they only call backend methods, the plaintext backend runs exactly
the same network of comparisons, selections and reveals as the CrypTen backend.
"""
