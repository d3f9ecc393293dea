"""`infest plan`: the fewest GPUs (layout, replicas, concurrency) meeting latency limits."""
from __future__ import annotations

import argparse
import json

from infest.exports.cli.cmd_serve import (add_batching_args, add_request_args, add_use_arg, chunk_of,
                                          make_engine)
from infest.exports.cli.common import add_spec_args, parse_rate, parse_sets, parse_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC --hw HW --isl --osl (--users | --rps) [--tpot-max] [--ttft-max] [--batching]
    [--chunk] [--gpus-max] [--engine] [--disaggregate] [--json] [--plot]."""
    add_spec_args(p, hw_required=True, phase=False)
    add_request_args(p)
    add_use_arg(p)
    demand = p.add_mutually_exclusive_group(required=True)
    demand.add_argument("--users", type=int, metavar="U", help="concurrent users to serve")
    demand.add_argument("--rps", metavar="R", help="requests per second to serve (20 or 20/s)")
    p.add_argument("--tpot-max", metavar="TIME", help="TPOT limit, e.g. 50ms")
    p.add_argument("--ttft-max", metavar="TIME", help="TTFT limit, e.g. 2s")
    add_batching_args(p)
    p.add_argument("--gpus-max", type=int, metavar="G", help="GPU limit (also caps one layout)")
    p.add_argument("--json", action="store_true", help="candidates, best, pareto")
    p.add_argument("-o", "--out", "--plot", dest="plot", metavar="FILE",
                   help="draw the Pareto front of the listed "
                   "candidates, best marked")
    p.add_argument("--disaggregate", action="store_true",
                   help="size a prefill pool (--ttft-max) and a decode pool (--tpot-max) apart")


def run(args: argparse.Namespace) -> int:
    """Search and print the best, the runners-up and the front (or JSON); with
    --disaggregate, the prefill and decode pools."""
    from infest.compiler.analyses.plan import Demand, plan
    from infest.dsl.errors import fail
    from infest.exports.text.serve_text import disagg_text, plan_text
    if args.plot and args.disaggregate:
        raise fail(None, "--plot draws the combined plan's front", "drop --disaggregate or --plot")
    if args.disaggregate and (args.chunk is not None or args.batching == "static"):
        raise fail(None, "--disaggregate sizes static batches in each pool",
                   "drop --chunk and --batching with --disaggregate")
    if args.plot:
        from infest.exports.plots.plots import check_plot_path
        check_plot_path(args.plot)
    demand = Demand(args.isl, args.osl, args.users, parse_rate("--rps", args.rps),
                    parse_time("--tpot-max", args.tpot_max), parse_time("--ttft-max", args.ttft_max),
                    args.gpus_max, args.batching, chunk_of(args))
    engines = _engines(args)
    from infest.compiler.analyses.budget import check_plan_job
    check_plan_job(engines, args.gpus_max)
    if args.disaggregate:
        from infest.compiler.analyses.disagg import disaggregate
        result = disaggregate(engines, demand, parse_sets(args.set))
        print(json.dumps(result, indent=2) if args.json else disagg_text(result))
        return 0
    result = {**plan(engines, demand, parse_sets(args.set)), "use": args.use}
    if args.plot:
        from infest.exports.plots.plan_plot import plot_pareto
        plot_pareto(result, args.plot)
    print(json.dumps(result, indent=2) if args.json else plan_text(result))
    return 0


def _engines(args: argparse.Namespace) -> dict:
    """One engine per policy searched (--policy, else every one the spec declares)."""
    first = make_engine(args)
    policies = [args.policy] if args.policy else list(first.decode.policies) or [first.decode.policy]
    return {p or "none": (first if p == first.decode.policy else make_engine(args, p))
            for p in policies}
