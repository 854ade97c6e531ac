"""Generate the Python gRPC modules from the `.proto` files of the wire contract.

The `.proto` files live in ``proto/starfish/v1/`` (protobuf package ``starfish.v1``)
and are compiled with the repository root as the include path, so the generated
modules import each other as ``proto.starfish.v1.<name>_pb2``. Run by
``make setup``; ``python -m proto.build --check`` exits 1 when generated code is stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = Path(__file__).resolve().parent / "starfish" / "v1"


def proto_files() -> list[Path]:
    """All `.proto` sources of the current contract version."""
    return sorted(PROTO_DIR.glob("*.proto"))


def is_stale() -> bool:
    """True when some generated module is missing or older than its `.proto` source."""
    for src in proto_files():
        for suffix in ("_pb2.py", "_pb2_grpc.py"):
            out = src.with_name(src.stem + suffix)
            if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
                return True
    return False


def build() -> None:
    """Run grpc_tools.protoc over every `.proto` file; raise on a compiler error."""
    import grpc_tools
    from grpc_tools import protoc  # build-time dependency only

    files = proto_files()
    if not files:
        return
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{REPO_ROOT}",
        f"-I{include}",
        f"--python_out={REPO_ROOT}",
        f"--pyi_out={REPO_ROOT}",
        f"--grpc_python_out={REPO_ROOT}",
        *[str(f.relative_to(REPO_ROOT)) for f in files],
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise RuntimeError(f"protoc failed with exit code {rc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if generated code is stale")
    opts = parser.parse_args(argv)
    if opts.check:
        return 1 if is_stale() else 0
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
