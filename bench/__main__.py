"""`python -m bench [--quick] [NAME ...]`: run the named benchmarks of the table (`bench.table`),
every one, cheapest first, when none is named. An unknown name exits 2 before anything runs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench.table import TABLE, UnknownBenchmark, run_all, select


def parser(prog: str = "python -m bench") -> argparse.ArgumentParser:
    """The arguments; `--help` lists the table."""
    width = max(len(b.name) for b in TABLE)
    listing = "\n".join(f"  {b.name:<{width}}  {b.what}" for b in TABLE)
    ap = argparse.ArgumentParser(
        prog=prog,
        description="Run benchmarks; each writes bench/results/<name>.json.",
        epilog=f"benchmarks, cheapest first:\n{listing}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes, finishes in minutes")
    return ap


def main(argv: Sequence[str] | None = None, prog: str = "python -m bench") -> int:
    args = parser(prog).parse_args(argv)
    try:
        chosen = select(args.names)
    except UnknownBenchmark as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    return run_all(chosen, args.quick)


if __name__ == "__main__":
    sys.exit(main())
