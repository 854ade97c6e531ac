"""Evaluation: datasets, partitions, the paper's models, the plaintext FL simulator,
backdoor and membership-inference attacks, metrics, comparison tables and plots.

Submodules import torch lazily where they need it; `evaluation.model_hash` and
`evaluation.uploads` are numpy-only so the server and the client SDK may use them.
"""
