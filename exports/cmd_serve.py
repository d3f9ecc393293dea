"""`infest serve`: TTFT, TPOT, E2E and throughput for a request shape and a concurrency."""
from __future__ import annotations

import argparse
import json

from infest.exports.common import add_spec_args, parse_sets


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC --hw HW --isl --osl --concurrency [--batching] [--chunk] [--set] [--json]."""
    add_spec_args(p, hw_required=True, phase=False)
    add_request_args(p)
    p.add_argument("--concurrency", type=int, required=True, metavar="C",
                   help="requests in flight (the global batch B)")
    p.add_argument("--batching", choices=("static", "continuous"), default="static",
                   help="static: prefill together, then decode together; continuous: "
                        "chunked prefill rides on the decode steps")
    p.add_argument("--chunk", type=int, metavar="TOKENS",
                   help="prefill tokens per step with --batching continuous (default 2048)")
    p.add_argument("--json", action="store_true", help="the serve --json contract object")


def add_request_args(p: argparse.ArgumentParser) -> None:
    """--isl and --osl (whole numbers of tokens), shared with `plan`."""
    p.add_argument("--isl", type=int, required=True, metavar="TOKENS", help="prompt tokens")
    p.add_argument("--osl", type=int, required=True, metavar="TOKENS", help="output tokens")


def make_engine(args: argparse.Namespace, policy: str | None = None):
    """The decode and prefill analyses of the spec on the command line."""
    from infest.compiler.api import analyze
    from infest.compiler.serve import Engine
    policy = policy if policy is not None else args.policy
    return Engine(*(analyze(args.spec, hw=args.hw, phase=phase, model=args.model, policy=policy)
                    for phase in ("decode", "prefill")))


def run(args: argparse.Namespace) -> int:
    """Evaluate the request shape and print text or JSON."""
    from infest.compiler.serve import DEFAULT_CHUNK, Request, check_request, serve
    from infest.exports.serve_text import serve_text
    request = Request(args.isl, args.osl, args.concurrency, args.batching,
                      DEFAULT_CHUNK if args.chunk is None else args.chunk)
    check_request(request)
    engine = make_engine(args)
    result = serve(engine, request, parse_sets(args.set))
    result.update(model=engine.decode.model.name, hardware=engine.decode.hardware.name,
                  policy=engine.decode.forms.layout.policy, isl=args.isl, osl=args.osl,
                  concurrency=args.concurrency, batching=args.batching)
    print(json.dumps(result, indent=2) if args.json else serve_text(result))
    return 0
