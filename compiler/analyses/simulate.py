"""A request-level discrete-event simulation of the continuous-batching scheduler.

The engine of docs/serving.md, one data-parallel rank: requests arrive (Poisson at rate
lambda, exponential gaps from a seeded generator), wait first come first served until the
running requests (in prefill or decoding) are fewer than the cap (KV capacity at
ISL + OSL - 1, or --max-concurrency), then every step carries

- one decode step of each decoding request (t tokens each: 1, or draft_len + 1 when
  speculating), and
- up to K - t d prompt tokens, taken in arrival order from the admitted prompts (a prompt
  longer than the room left is split over several steps).

The scheduler looks for new arrivals (they join the queue) before a step only when it
polls: after any step that carried prompt tokens, whenever it was idle, and otherwise
every `poll` decode-only steps (the estimate's poll_interval: SGLang's
--scheduler-recv-interval; 1, every step, by default).

The step that processes a prompt's last token emits its first token (TTFT = that step's
end - the arrival); the request then decodes R steps (O - 1, or the rounds speculation
takes, rounded up: ceil((O - 1) / tokens per round), the mean acceptance every round) and
leaves at the end of its last one; TPOT = (leaving - first token) / (O - 1).

Each step costs the interpolated StepGrid value (compiler/analyses/stepgrid.py: one
vectorised evaluation of the compiled forms) at its decoders, their mean context, its
prompt tokens and their mean cached context. Steps without prompt tokens between two
events (an arrival that can be admitted, a request leaving) are costed together as one
numpy array: the loop runs once per event, not once per step.

With a length spread s (`--length-spread`), each request's ISL and OSL are drawn
uniformly from the whole numbers L(1 - s) .. L(1 + s) (mean L, the closed forms' L), as
benchmark clients draw them (vLLM's random dataset, --random-range-ratio); requests then
leave out of arrival order.

Statistics are over `requests` requests after `warmup` (by arrival order); arrivals keep
coming until every measured request has left, so the measured ones see a steady load.

The closed loop (`simulate_closed`, serve --concurrency C --simulate): C clients send
their first requests at once, as benchmark clients do, and each sends its next the moment
its last one leaves; a request reaches the scheduler the per-request overhead after it was
sent (its TTFT counts from the sending). With equal lengths the clients stay in step, as
such a benchmark's do; a length spread moves them out of step over the warm-up.
"""
from __future__ import annotations

import bisect
import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from infest.compiler.analyses.stepgrid import StepGrid
from infest.dsl.errors import fail

DEFAULT_REQUESTS = 10_000
DEFAULT_WARMUP = 1_000
DEFAULT_SEED = 0
MAX_REQUESTS = 1_000_000       # --requests (with the warm-up) a simulation may take
MAX_EVENTS_PER_REQUEST = 64    # loop turns per request before a run is called runaway
ARRIVAL_BLOCK = 4096           # arrival gaps drawn at a time
PERCENTILES = (90, 99)
MAX_POLL_INTERVAL = 10_000     # decode steps between the scheduler's looks (simulated)
MAX_CLIENTS = 1 << 20          # a simulated closed loop's clients per scheduler


@dataclass(frozen=True)
class Load:
    """What one rank's simulation serves: arrivals per second, the running cap, the
    request shape, the budget K per step, tokens per decoder per step and decode steps."""

    rate: float
    cap: int
    isl: int
    osl: int
    budget: int
    tokens: float = 1.0
    decode_steps: int | None = None
    spread: float = 0.0

    def rounds(self, osl: int) -> int:
        """R: the steps a request of `osl` output tokens decodes for."""
        return osl - 1 if self.decode_steps is None else self.decode_steps

    def lengths(self, rng: np.random.Generator) -> tuple[int, int]:
        """One request's (ISL, OSL): the load's, or drawn with its spread (module doc)."""
        if not self.spread:
            return self.isl, self.osl
        low = [max(1, math.ceil(x * (1 - self.spread))) for x in (self.isl, self.osl)]
        high = [math.floor(x * (1 + self.spread)) for x in (self.isl, self.osl)]
        isl, osl = (int(rng.integers(lo, hi + 1)) for lo, hi in zip(low, high))
        return isl, max(osl, 2)

    def length_bounds(self) -> tuple[int, int, int]:
        """(the shortest ISL, the longest ISL, the longest OSL) a request may draw."""
        s = self.spread
        return (max(1, math.ceil(self.isl * (1 - s))), math.floor(self.isl * (1 + s)),
                math.floor(self.osl * (1 + s)))


def check_spread(spread: Any) -> None:
    """--length-spread: a share from 0 to below 1."""
    if isinstance(spread, bool) or not isinstance(spread, (int, float)) \
            or not 0 <= spread < 1:
        raise fail(None, f"--length-spread {spread!r}: a share from 0 up to (not including) 1",
                   "0.2: lengths uniform from 0.8 L to 1.2 L")


def check_run(requests: Any, warmup: Any) -> None:
    """--requests: a whole number 1 .. MAX_REQUESTS (with the warm-up)."""
    if isinstance(requests, bool) or not isinstance(requests, int) or requests < 1:
        raise fail(None, f"--requests {requests!r}: must be a whole number at least 1")
    if requests + warmup > MAX_REQUESTS:
        raise fail(None, f"--requests {requests:,} + {warmup:,} of warm-up: more than "
                   f"{MAX_REQUESTS:,} (MAX_REQUESTS)")


class _Arrivals:
    """Poisson arrival times, drawn in blocks from one seeded generator; or given times
    (none after the last)."""

    def __init__(self, rate: float, seed: int, times: list[float] | None = None) -> None:
        self.rng, self.rate = np.random.default_rng(seed), rate
        self.given = times is not None
        self.times: list[float] = list(times or [])
        self.last = 0.0

    def __getitem__(self, i: int) -> float:
        if self.given:
            return self.times[i] if i < len(self.times) else math.inf
        while i >= len(self.times):
            gaps = np.cumsum(self.rng.exponential(1.0 / self.rate, ARRIVAL_BLOCK)) + self.last
            self.times.extend(gaps.tolist())
            self.last = self.times[-1]
        return self.times[i]


class _Engine:
    """The scheduler's state on one rank, stepped by `simulate`."""

    def __init__(self, grid: StepGrid, load: Load, seed: int,
                 times: list[float] | None = None, closed: bool = False) -> None:
        self.grid, self.load, self.closed = grid, load, closed
        self.arrivals = _Arrivals(load.rate, seed, times)
        self.draws = np.random.default_rng([seed, 1])   # lengths: their own stream
        self.shape: dict[int, tuple[int, int]] = {}      # request -> (ISL, OSL)
        self.now, self.step = 0.0, 0
        self.next = 0                          # the next request to arrive
        self.waiting: deque[int] = deque()     # arrived, not admitted
        self.prefill: deque[list] = deque()    # [request, prompt tokens done]
        self.decoding: list[tuple[int, int]] = []   # heap of (leaving step, request)
        self.joined = 0                        # sum of the decoders' first decode steps
        self.prompts = 0                       # sum of the decoders' ISLs
        self.last, self.measured = 0, 0        # requests 0 .. last - 1 measured; left
        self.poll = _whole_poll(grid.poll)     # decode-only steps between looks
        self.looked, self.due = 0, True        # the step of the last look; look next turn
        self.first: dict[int, float] = {}      # request -> first-token time
        self.done: list[tuple[int, float, float]] = []    # (request, TTFT, TPOT)

    def running(self) -> int:
        return len(self.prefill) + len(self.decoding)

    def admit(self) -> None:
        """When the scheduler looks (`looks`), arrivals up to now join the queue; the
        queue's head enters while below the cap."""
        if self.looks():
            self.looked, self.due = self.step, False
            while self.arrivals[self.next] <= self.now:
                self.waiting.append(self.next)
                self.shape[self.next] = self.load.lengths(self.draws)
                self.next += 1
        while self.waiting and self.running() < self.load.cap:
            self.prefill.append([self.waiting.popleft(), 0])

    def looks(self) -> bool:
        """Whether the scheduler looks for arrivals before the step about to start: after
        a step with prompt tokens or idling (`due`), else every `poll` decode steps."""
        return self.due or (self.step - self.looked) % self.poll == 0

    def next_look(self, first: int) -> int:
        """The first decode step from now, `first` or later, before which it looks."""
        phase = self.poll - (self.step - self.looked) % self.poll   # 1 .. poll
        return phase + max(0, math.ceil((first - phase) / self.poll)) * self.poll

    def mean_context(self, ahead: int = 0) -> float:
        """The decoders' mean cached context `ahead` steps from now."""
        d = len(self.decoding)
        steps = d * (self.step + ahead) - self.joined
        return (self.prompts + self.load.tokens * steps) / d if d else float(self.load.isl)

    def mixed(self) -> None:
        """One step carrying prompt tokens."""
        d, load = len(self.decoding), self.load
        room = load.budget - load.tokens * d
        taken, cached = 0.0, 0.0
        for entry in self.prefill:
            if room - taken < 1:
                break
            take = min(self.shape[entry[0]][0] - entry[1], math.floor(room - taken))
            cached += take * entry[1]
            entry[1] += take
            taken += take
        cost = self.grid.step(d, self.mean_context(), taken, cached / taken if taken else 0.0)
        self.advance(1, cost)
        self.due = True                        # a step with prompt tokens: look next
        # Prompts take their tokens in order, so the head finishes first.
        while self.prefill and self.prefill[0][1] >= self.shape[self.prefill[0][0]][0]:
            request = self.prefill.popleft()[0]
            isl, osl = self.shape[request]
            self.first[request] = self.now
            heapq.heappush(self.decoding, (self.step + load.rounds(osl), request))
            self.joined += self.step
            self.prompts += isl

    def pure(self) -> None:
        """Decode-only steps up to the next event: the first step to start after an
        arrival that can be admitted and before which the scheduler looks, or the step
        where the oldest decoder leaves."""
        d = len(self.decoding)
        k_max = self.decoding[0][0] - self.step
        costs = self.grid.pure(d, self.mean_context() + self.load.tokens * np.arange(k_max))
        ends = np.cumsum(costs)
        k = k_max
        if self.running() < self.load.cap:     # an arrival enters at the next step start
            starts = self.now + ends - costs
            first = int(np.searchsorted(starts, self.arrivals[self.next]))
            k = max(1, min(k_max, self.next_look(first)))
        self.advance(k, float(ends[k - 1]))

    def advance(self, steps: int, seconds: float) -> None:
        """Move the clock; decoders whose last step has run leave."""
        self.now += seconds
        self.step += steps
        while self.decoding and self.decoding[0][0] <= self.step:
            leave, request = heapq.heappop(self.decoding)
            isl, osl = self.shape.pop(request)
            self.joined -= leave - self.load.rounds(osl)
            self.prompts -= isl
            first = self.first.pop(request)
            arrival = self.arrivals[request]
            ttft = first - arrival + self.grid.request   # the request's own overhead
            self.done.append((request, ttft, (self.now - first) / (osl - 1)))
            self.measured += request < self.last
            if self.closed:   # its client's next request, sent now, reaches the scheduler
                bisect.insort(self.arrivals.times, self.now + self.grid.request)


def _whole_poll(poll: float) -> int:
    """The poll interval as whole decode steps (the closed forms take any k >= 1)."""
    if poll < 1 or poll != math.floor(poll) or poll > MAX_POLL_INTERVAL:
        raise fail(None, f"poll_interval {poll:g}: the simulation looks every whole number "
                   f"of decode steps, 1 to {MAX_POLL_INTERVAL:,} (MAX_POLL_INTERVAL)",
                   "--set poll_interval=<whole number>")
    return int(poll)


def simulate(grid: StepGrid, load: Load, requests: int = DEFAULT_REQUESTS,
             warmup: int = DEFAULT_WARMUP, seed: int = DEFAULT_SEED,
             times: list[float] | None = None) -> dict[str, Any]:
    """simulated {ttft_s, ttft_p90_s, ttft_p99_s, tpot_s, tpot_p90_s, tpot_p99_s,
    requests}: means and percentiles over the measured requests (seconds). `times`: the
    arrivals themselves (warmup + requests of them) instead of Poisson ones."""
    return summary(run(grid, load, requests, warmup, seed, times), warmup, warmup + requests)


def run(grid: StepGrid, load: Load, requests: int = DEFAULT_REQUESTS,
        warmup: int = DEFAULT_WARMUP, seed: int = DEFAULT_SEED,
        times: list[float] | None = None) -> list[tuple[int, float, float]]:
    """(request, TTFT, TPOT) of every request that left, in the order they left."""
    check_run(requests, warmup)
    return _drive(_Engine(grid, load, seed, times), warmup + requests)


def simulate_closed(grid: StepGrid, load: Load, clients: int, requests: int = DEFAULT_REQUESTS,
                    warmup: int = DEFAULT_WARMUP, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """simulate's keys for a closed loop of `clients` (module docstring; load.cap running
    at most, the rest waiting in the queue as they do at the cap; load.rate is not read)."""
    check_run(requests, warmup)
    if clients > MAX_CLIENTS:
        raise fail(None, f"the simulation's closed loop has {clients:,} clients per "
                   f"scheduler, more than {MAX_CLIENTS:,} (MAX_CLIENTS)")
    engine = _Engine(grid, load, seed, [0.0] * clients, closed=True)
    return summary(_drive(engine, warmup + requests), warmup, warmup + requests)


def _drive(engine: _Engine, last: int) -> list[tuple[int, float, float]]:
    """Turn the engine until requests 0 .. last - 1 have left; every (request, TTFT,
    TPOT) that left, in the order they left."""
    engine.last = last
    limit = MAX_EVENTS_PER_REQUEST * last
    turns = 0
    while engine.measured < last:
        turns += 1
        if turns > limit:
            raise fail(None, f"the simulation took more than {limit:,} turns "
                       "(MAX_EVENTS_PER_REQUEST per request)")
        _turn(engine)
    return engine.done


def _turn(engine: _Engine) -> None:
    engine.admit()
    if engine.prefill:
        engine.mixed()
    elif engine.decoding:
        engine.pure()
    else:                                      # idle: the clock jumps to the next arrival
        engine.now = max(engine.now, engine.arrivals[engine.next])
        engine.due = True                      # an idle scheduler looks all the time


def summary(done: list[tuple[int, float, float]], warmup: int, last: int) -> dict[str, Any]:
    """Means and percentiles of TTFT and TPOT over requests warmup .. last - 1."""
    rows = np.array([(t, p) for r, t, p in done if warmup <= r < last], dtype=float)
    out: dict[str, Any] = {"ttft_s": float(rows[:, 0].mean())}
    out.update({f"ttft_p{q}_s": float(np.percentile(rows[:, 0], q)) for q in PERCENTILES})
    out["tpot_s"] = float(rows[:, 1].mean())
    out.update({f"tpot_p{q}_s": float(np.percentile(rows[:, 1], q)) for q in PERCENTILES})
    return {**out, "requests": len(rows)}
