"""Composite two-party protocols, one file per protocol of the Starfish paper.

Each is a function over `mpc.primitives.Primitives` (the algorithm and line are cited in
its docstring) and imports nothing else of `mpc`; `mpc.backend.Backend` binds them as
methods. Because they only call primitives, the plaintext backend runs exactly the same
network of comparisons, selections and reveals as the CrypTen backend.

secge (SecGE2/3/4), secmax (SecMax), secmi (SecMI and Newton–Schulz), secmul3 (SecMul3),
secclip (SecClip), secsel (SecSel), secsp (SecSP), secsrt (SecSrt), sectc (SecTC).
"""
