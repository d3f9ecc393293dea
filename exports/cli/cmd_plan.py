"""`infest plan`: the fewest GPUs (layout, replicas, concurrency) meeting latency limits."""
from __future__ import annotations

import argparse
import json

from infest.exports.cli.cmd_serve import (add_batching_args, add_request_args, add_use_arg, chunk_of,
                                          make_engine)
from infest.exports.cli.common import add_spec_args, parse_rate, parse_sets, parse_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC --hw HW --isl --osl (--users | --rps | --gpus) [--tpot-max] [--ttft-max]
    [--slo-percentile] [--batching] [--chunk] [--gpus-max] [--engine] [--disaggregate
    [--prefill-hw] [--decode-hw]] [--json] [--plot]."""
    add_spec_args(p, hw_required=True, phase=False)
    add_request_args(p)
    add_use_arg(p)
    demand = p.add_mutually_exclusive_group(required=True)
    demand.add_argument("--users", type=int, metavar="U", help="concurrent users to serve")
    demand.add_argument("--rps", metavar="R", help="requests per second to serve, Poisson "
                        "arrivals (20 or 20/s)")
    demand.add_argument("--gpus", type=int, metavar="G", help="a GPU budget: the most "
                        "tokens/s from G GPUs, aggregated and disaggregated side by side")
    p.add_argument("--tpot-max", metavar="TIME", help="TPOT limit, e.g. 50ms")
    p.add_argument("--ttft-max", metavar="TIME", help="TTFT limit, e.g. 2s")
    p.add_argument("--slo-percentile", type=int, choices=(90, 99), metavar="90|99",
                   help="compare --ttft-max with that TTFT percentile (open loop: --rps)")
    add_batching_args(p)
    p.add_argument("--gpus-max", type=int, metavar="G", help="GPU limit (also caps one layout)")
    p.add_argument("--json", action="store_true", help="candidates, best, pareto")
    p.add_argument("-o", "--out", "--plot", dest="plot", metavar="FILE",
                   help="draw the Pareto front of the listed "
                   "candidates, best marked")
    p.add_argument("--disaggregate", action="store_true",
                   help="size a prefill pool (--ttft-max) and a decode pool (--tpot-max) apart")
    p.add_argument("--prefill-hw", metavar="HW", help="the prefill pool's hardware "
                   "(default --hw)")
    p.add_argument("--decode-hw", metavar="HW", help="the decode pool's hardware "
                   "(default --hw)")


def run(args: argparse.Namespace) -> int:
    """Search and print the best, the runners-up and the front (or JSON); with
    --disaggregate, the prefill and decode pools; with --gpus, both side by side."""
    from infest.compiler.analyses.plan import Demand
    from infest.compiler.analyses.planner import answer
    from infest.dsl.errors import fail
    from infest.exports.text.serve_text import disagg_text, plan_text
    pools = args.disaggregate or args.gpus is not None
    if args.plot and args.disaggregate:
        raise fail(None, "--plot draws the combined plan's front", "drop --disaggregate or --plot")
    if args.disaggregate and (args.chunk is not None or args.batching == "static"):
        raise fail(None, "--disaggregate sizes static batches in each pool",
                   "drop --chunk and --batching with --disaggregate")
    if (args.prefill_hw or args.decode_hw) and not pools:
        raise fail(None, "--prefill-hw and --decode-hw place the disaggregated pools",
                   "add --disaggregate (or --gpus G)")
    if args.plot:
        from infest.exports.plots.plots import check_plot_path
        check_plot_path(args.plot)
    demand = Demand(args.isl, args.osl, args.users, parse_rate("--rps", args.rps),
                    parse_time("--tpot-max", args.tpot_max), parse_time("--ttft-max", args.ttft_max),
                    args.gpus_max, args.batching, chunk_of(args), args.gpus, args.slo_percentile)
    engines = _engines(args, args.prefill_hw or args.hw) if pools else _engines(args)
    decode = _engines(args, args.decode_hw) if pools and args.decode_hw else None
    aggregated = _engines(args) if pools and args.prefill_hw else engines
    _check_budget(demand, aggregated, engines, decode)
    result = answer(aggregated, demand, parse_sets(args.set), args.disaggregate, decode,
                    prefill_engines=engines if pools else None)
    result["use"] = args.use
    if args.plot:
        from infest.exports.plots.plan_plot import plot_pareto
        plot_pareto(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(disagg_text(result) if args.disaggregate and args.gpus is None else plan_text(result))
    return 0


def _check_budget(demand, *engine_sets) -> None:
    """Every search counted before any is evaluated (compiler/analyses/budget.py)."""
    from infest.compiler.analyses.budget import check_plan_job
    for engines in engine_sets:
        if engines is not None:
            check_plan_job(engines, demand.layout_gpus, open_loop=demand.rps is not None)


def _engines(args: argparse.Namespace, hw: str | None = None) -> dict:
    """One engine per policy searched (--policy, else every one the spec declares), on
    `hw` (default --hw)."""
    if hw is not None and hw != args.hw:
        args = argparse.Namespace(**{**vars(args), "hw": hw})
    first = make_engine(args)
    policies = [args.policy] if args.policy else list(first.decode.policies) or [first.decode.policy]
    return {p or "none": (first if p == first.decode.policy else make_engine(args, p))
            for p in policies}
