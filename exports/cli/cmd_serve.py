"""`infest serve`: TTFT, TPOT, E2E and throughput for a request shape and a concurrency."""
from __future__ import annotations

import argparse
import json

from infest.exports.cli.common import add_spec_args, parse_rate, parse_sets


def add_arguments(p: argparse.ArgumentParser) -> None:
    """SPEC --hw HW --isl --osl --concurrency [--batching] [--chunk] [--engine] [--set]
    [--draft ..] [--json]."""
    add_spec_args(p, hw_required=True, phase=False)
    add_request_args(p)
    add_use_arg(p)
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, metavar="C",
                      help="clients per replica, closed loop: each sends its next request "
                           "the moment one ends; those beyond what the KV cache holds at "
                           "ISL + OSL - 1 wait (static: the batch)")
    load.add_argument("--rps", metavar="R", help="open loop: Poisson arrivals per replica, "
                      "per second (20 or 20/s)")
    p.add_argument("--max-concurrency", type=int, metavar="C", help="running requests per "
                   "replica, the engine's own limit (vLLM's max_num_seqs, SGLang's "
                   "--max-running-requests); the other requests wait (default: the KV "
                   "capacity at ISL + OSL - 1)")
    p.add_argument("--simulate", action="store_true", help="also run the request-level "
                   "simulation of the same scheduler (--rps: Poisson arrivals; --concurrency: "
                   "the closed loop, its clients sending at once)")
    p.add_argument("--length-spread", type=float, metavar="S", help="with --simulate: each "
                   "request's ISL and OSL uniform on L(1 - S) .. L(1 + S) (default 0: all L)")
    p.add_argument("--requests", type=int, metavar="N", help="with --simulate: requests "
                   "measured, after 1,000 of warm-up (default 10,000)")
    p.add_argument("--seed", type=int, metavar="S", help="with --simulate: the seed of its "
                   "arrivals and lengths (default 0)")
    p.add_argument("--prompts", type=int, metavar="P", help="with --concurrency: TTFT as a "
                   "benchmark of P prompts reports it, its clients started at once (the first "
                   "C prompts' start-up wave in the mean; default: the steady state)")
    add_batching_args(p)
    p.add_argument("--draft", metavar="SPEC|mtp", help="speculative decoding: the draft "
                   "model's spec, or mtp: the spec's own multi-token-prediction layers")
    p.add_argument("--draft-len", type=int, default=4, metavar="K",
                   help="tokens the draft proposes per round (default 4)")
    p.add_argument("--acceptance", type=float, metavar="A",
                   help="chance a drafted token is accepted, 0 <= A < 1 (required with --draft)")
    p.add_argument("--json", action="store_true", help="the serve --json contract object")


def add_batching_args(p: argparse.ArgumentParser) -> None:
    """--batching and --chunk, shared with `plan`."""
    p.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                   help="continuous (default): every step carries the running requests' "
                        "decode tokens plus prompt chunks up to --chunk tokens; static: a "
                        "batch prefills together, then decodes together")
    p.add_argument("--chunk", type=int, metavar="TOKENS",
                   help="tokens per step, decode tokens included (vLLM's "
                        "max_num_batched_tokens) with --batching continuous (default 2048)")


def add_use_arg(p: argparse.ArgumentParser) -> None:
    """--use estimate|bound, shared with `plan`: which step time the metrics come from."""
    p.add_argument("--use", choices=("estimate", "bound"), default="estimate",
                   help="cost steps by the estimate (achievable ceilings, default) or the "
                        "bound (roofline: datasheet peaks); the bound is shown beside either")


def add_request_args(p: argparse.ArgumentParser) -> None:
    """--isl and --osl (whole numbers of tokens), shared with `plan`."""
    p.add_argument("--isl", type=int, required=True, metavar="TOKENS", help="prompt tokens")
    p.add_argument("--osl", type=int, required=True, metavar="TOKENS", help="output tokens")


def make_engine(args: argparse.Namespace, policy: str | None = None):
    """The decode and prefill runners of the spec on the command line (from the private
    cache when nothing changed)."""
    from infest.compiler.backend.cache import cached_runner
    from infest.compiler.analyses.serve import Serving
    policy = policy if policy is not None else args.policy
    return Serving(*(cached_runner(args.spec, args.hw, phase=phase, model=args.model,
                                   policy=policy, engine=args.engine)
                    for phase in ("decode", "prefill")), use=args.use)


def chunk_of(args: argparse.Namespace) -> int:
    """--chunk, or the default budget; refused with --batching static (it has no budget)."""
    from infest.compiler.analyses.serve import DEFAULT_CHUNK
    from infest.dsl.errors import fail
    if args.chunk is not None and args.batching == "static":
        raise fail(None, "--chunk is the continuous token budget", "drop --chunk or --batching static")
    return DEFAULT_CHUNK if args.chunk is None else args.chunk


def run(args: argparse.Namespace) -> int:
    """Evaluate the request shape and print text or JSON."""
    from infest.compiler.analyses.serve import Request, check_request, serve
    from infest.dsl.errors import fail
    from infest.exports.text.serve_text import serve_text
    closed = args.max_concurrency if args.rps is None else None   # --rps: the OpenLoad's
    request = Request(args.isl, args.osl, args.concurrency, args.batching, chunk_of(args),
                      args.prompts, closed)
    check_request(request)
    from infest.compiler.analyses.budget import check_serve_job
    check_serve_job(request.isl, request.chunk, request.batching)
    load = _open_load(args, request)
    if args.prompts is not None and args.requests is not None:
        raise fail(None, "--prompts with --requests: --prompts sets the simulated requests "
                   "(the benchmark as run, no warm-up)", "drop --requests")
    if args.prompts is not None and args.draft is not None:
        raise fail(None, "--prompts with --draft: the start-up wave is not modelled with "
                   "speculation", "drop --prompts or --draft")
    draft = _draft(args)
    if load is not None and draft is not None:
        raise fail(None, "--rps with --draft: the open loop does not model speculation yet",
                   "use --concurrency with --draft")
    engine = make_engine(args)
    if load is None:
        result = serve(engine, request, parse_sets(args.set), draft)
        result["concurrency"] = args.concurrency
        if args.simulate:
            from infest.compiler.analyses.serve_sim import simulated_closed
            result["simulated"] = simulated_closed(engine, request, parse_sets(args.set),
                                                   *_simulation(args))
    else:
        from infest.compiler.analyses.serve_open import serve_open
        result = serve_open(engine, request, load, parse_sets(args.set))
    result.update(use=args.use, model=engine.decode.model, hardware=engine.decode.hardware,
                  policy=engine.decode.policy, engine=engine.decode.engine, isl=args.isl,
                  osl=args.osl, chunk=request.chunk if args.batching == "continuous" else None)
    print(json.dumps(result, indent=2) if args.json else serve_text(result))
    return 0


def _open_load(args: argparse.Namespace, request):
    """The open loop of --rps (checked), or None with --concurrency (whose own flags are
    then refused)."""
    from infest.dsl.errors import fail
    for flag, given in (("--length-spread", args.length_spread), ("--requests", args.requests),
                        ("--seed", args.seed)):
        if given is not None and not args.simulate:
            raise fail(None, f"{flag} needs --simulate", "the closed forms take every "
                       "request at the mean lengths, --isl and --osl, and draw nothing")
    if args.rps is None:
        if args.simulate and (args.batching != "continuous" or args.draft is not None):
            raise fail(None, "--simulate runs the continuous-batching scheduler without a draft",
                       "drop --batching static and --draft, or --simulate")
        return None
    from infest.compiler.analyses.serve_open import OpenLoad, check_load
    requests, seed, spread = _simulation(args)
    load = OpenLoad(parse_rate("--rps", args.rps), args.max_concurrency, args.simulate,
                    requests, seed=seed, spread=spread)
    check_load(load, request)
    return load


def _simulation(args: argparse.Namespace) -> tuple[int, int, float]:
    """(--requests, --seed, --length-spread), each its default where not given (10,000
    requests, seed 0, spread 0: every request ISL and OSL long)."""
    from infest.compiler.analyses.simulate import DEFAULT_REQUESTS, DEFAULT_SEED
    return (DEFAULT_REQUESTS if args.requests is None else args.requests,
            DEFAULT_SEED if args.seed is None else args.seed,
            0.0 if args.length_spread is None else args.length_spread)


def _draft(args: argparse.Namespace):
    """The draft of --draft (checked first), or None without it."""
    from infest.dsl.errors import fail
    if args.draft is None:
        if args.acceptance is not None:
            raise fail(None, "--acceptance needs --draft SPEC")
        return None
    from infest.compiler.backend.cache import cached_runner
    from infest.compiler.analyses.serve import Serving
    from infest.compiler.analyses.speculative import Draft, check_draft
    if args.acceptance is None:
        raise fail(None, "--draft needs --acceptance A", "e.g. --acceptance 0.7")
    check_draft(args.draft_len, args.acceptance)
    if args.draft == "mtp":
        from infest.compiler.analyses.mtp import mtp_draft
        return mtp_draft(args.spec, args.hw, args.draft_len, args.acceptance, parse_sets(args.set),
                         model=args.model, policy=args.policy, engine=args.engine, use=args.use)
    engine = Serving(*(cached_runner(args.draft, args.hw, phase=phase, engine=args.engine)
                      for phase in ("decode", "prefill")), use=args.use)
    return Draft(engine, args.draft_len, args.acceptance)
