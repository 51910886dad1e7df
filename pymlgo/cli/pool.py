"""`mlgo pool serve|status|stop`: a named worker pool that experiments share.

    mlgo pool serve --name NAME [--workers N]   # then: mlgo train ... --cluster pool:NAME
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pymlgo.workers.pool import PoolServer, pool_stats, serve_pool, stop_pool


def register(subparsers: Any) -> None:
    """Add `pool` and its subcommands; each sets `func(args) -> int`."""
    pool = subparsers.add_parser(
        "pool", help="serve a compile-worker pool that several experiments share",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = pool.add_subparsers(dest="pool_command", required=True)

    serve = sub.add_parser("serve", help="run the pool until Ctrl-C, SIGTERM or `pool stop`")
    serve.add_argument("--name", required=True, help="pool name used in --cluster pool:NAME")
    serve.add_argument("--workers", "-j", type=int, default=None,
                       help="compile worker processes (default: every core)")
    serve.add_argument("--runtime-dir", default=None,
                       help="where the socket lives (default: $MLGO_RUNTIME_DIR, "
                            "$XDG_RUNTIME_DIR/pymlgo or <tmp>/pymlgo-<uid>)")
    serve.set_defaults(func=_serve)

    status = sub.add_parser("status", help="print the pool's state as JSON")
    status.add_argument("--name", required=True)
    status.add_argument("--runtime-dir", default=None)
    status.add_argument("--starts", action="store_true",
                        help="include the log of job starts (experiment, module)")
    status.set_defaults(func=_status)

    stop = sub.add_parser("stop", help="stop a pool; attached experiments get an error")
    stop.add_argument("--name", required=True)
    stop.add_argument("--runtime-dir", default=None)
    stop.set_defaults(func=_stop)


def _serve(args: argparse.Namespace) -> int:
    def ready(server: PoolServer) -> None:
        print(f"pool {server.name!r}: {server.dispatcher.num_workers} workers on "
              f"{server.path}; attach with --cluster pool:{server.name}",
              file=sys.stderr, flush=True)

    serve_pool(args.name, args.workers, runtime=args.runtime_dir, on_ready=ready)
    return 0


def _status(args: argparse.Namespace) -> int:
    stats = pool_stats(args.name, runtime=args.runtime_dir)
    if not args.starts:
        stats["starts"] = len(stats["starts"])
    print(json.dumps(stats, indent=2))
    return 0


def _stop(args: argparse.Namespace) -> int:
    stop_pool(args.name, runtime=args.runtime_dir)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m pymlgo.cli.pool ...`, the same as `mlgo pool ...`."""
    parser = argparse.ArgumentParser(prog="mlgo")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["pool", *(sys.argv[1:] if argv is None else argv)])
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
