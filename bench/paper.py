"""The Starfish paper's published 2PC figures (ABY, LAN unless stated), for side-by-side tables.

Table I (MNIST) and Table VII (F-MNIST, CIFAR-10): one unlearning round, per step;
Table II (MNIST) and Table VIII (F-MNIST, CIFAR-10): the whole unlearning process.
Times in seconds, communication in GB (10^9 bytes as printed by the paper).
"""

from __future__ import annotations

#: step → dataset → (offline s, online s, offline GB, online GB)
PER_STEP: dict[str, dict[str, tuple[float, float, float, float]]] = {
    "TD": {  # TD² (Starfish's threshold determination)
        "mnist": (0.01, 0.02, 0.11, 0.01),
        "fmnist": (0.01, 0.03, 0.11, 0.01),
        "cifar10": (0.01, 0.03, 0.11, 0.01),
    },
    "RS1": {
        "mnist": (145.1, 21.80, 29.80, 0.56),
        "fmnist": (174.01, 31.39, 35.08, 0.66),
        "cifar10": (274.51, 57.77, 51.58, 0.97),
    },
    "RS2": {
        "mnist": (87.15, 13.14, 17.88, 0.34),
        "fmnist": (104.48, 18.90, 21.05, 0.39),
        "cifar10": (164.79, 34.73, 30.95, 0.58),
    },
    "UE": {
        "mnist": (3.59, 1.68, 2.14, 0.04),
        "fmnist": (3.73, 1.73, 2.27, 0.04),
        "cifar10": (4.19, 1.82, 2.73, 0.05),
    },
    "TC": {
        "mnist": (689.44, 103.76, 141.55, 2.66),
        "fmnist": (826.67, 149.34, 166.65, 3.13),
        "cifar10": (1304.12, 274.61, 244.98, 4.59),
    },
}

#: dataset → (offline s, online s, offline GB, online GB) of the whole unlearning, LAN
WHOLE_JOB_LAN: dict[str, tuple[float, float, float, float]] = {
    "mnist": (18826.21, 3623.81, 3530.85, 66.27),
    "fmnist": (22181.12, 4733.36, 4141.57, 77.73),
    "cifar10": (33818.05, 7767.60, 6053.25, 113.57),
}

#: dataset → (offline s, online s, offline GB, online GB) of the whole unlearning, WAN
WHOLE_JOB_WAN: dict[str, tuple[float, float, float, float]] = {
    "mnist": (25801.17, 3735.61, 3562.54, 66.93),
    "fmnist": (30434.06, 4980.18, 4177.08, 78.39),
    "cifar10": (46852.64, 8408.44, 6108.37, 114.58),
}

#: the paper's model architecture per dataset (our `evaluation.models` names)
ARCHITECTURE = {"mnist": "mnist_cnn", "fmnist": "fmnist_cnn", "cifar10": "cifar_cnn"}
