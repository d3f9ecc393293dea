"""The closed loop's queueing terms (compiler/analyses/arrivals.py), worked by hand."""
from __future__ import annotations

import numpy as np
import pytest

from infest.compiler.analyses.arrivals import closed_loop, queueing
from infest.compiler.analyses.continuous import Budget, Decoding

# One prompt alone in one mixed step of 100 ms (1,000 prompt tokens beside the 2 other
# decoders), pure decode steps of 10 ms, a 2,048-token budget; ISL 1000, OSL 101.
SCHED = {"alone": np.array(True), "ttft_steps": np.array(1.0), "prompts": np.array(1.0),
         "chunk": np.array(1000.0), "chunks": np.array(1.0), "mixed_decoders": np.array(2.0)}
BUDGET, DECODING = Budget(1000, 101, 2048), Decoding(1.0, 100.0)


def _closed(ttft: float, tpot: float, poll: float = 1.0) -> dict:
    return {"sched": SCHED, "mixed": 0.1, "pure": 0.01, "poll": poll, "ttft": ttft,
            "tpot": tpot}


def test_three_clients_by_hand() -> None:
    # E2E = 0.2 + 100 x 0.018 = 2 s, so the 2 others arrive at lambda = 2 / 2 = 1 per s.
    q = closed_loop(3, _closed(0.2, 0.018), BUDGET, DECODING)
    assert float(q["rate"]) == pytest.approx(1.0)
    # Mixed steps a fraction lambda x 1 step x 0.1 s = 0.1 of the time: the residual is
    # (0.1 x 0.1 + 0.9 x 0.01) / 2 = 0.0095 s.
    assert float(q["residual"]) == pytest.approx(0.0095, rel=1e-12)
    # A prompt token costs (0.1 - 0.01) / 1000 = 9e-5 s; beside 2 decoders the budget has
    # 2046 tokens: s = 1000 / 2046 x 0.01 + 1000 x 9e-5 = 0.0948876 s = rho_b (lambda 1);
    # M/D/1: W = 0.0948876^2 / (2 x 0.9051124) = 0.00497378 s.
    s = 1000 / 2046 * 0.01 + 0.09
    assert float(q["rho_b"]) == pytest.approx(s, rel=1e-12)
    assert float(q["wait"]) == pytest.approx(s * s / (2 * (1 - s)), rel=1e-12)
    assert float(q["wait"]) == pytest.approx(0.00497378, rel=1e-5)
    # Prompts arriving during the residual, 1 x 0.0095 x 1000 = 9.5 tokens, fit in the
    # 2046 - 1000 = 1046 left and join its step: 9.5 x 9e-5 = 0.000855 s.
    assert float(q["share"]) == pytest.approx(0.000855, rel=1e-12)
    assert float(q["ttft"]) == pytest.approx(0.2 + 0.0095 + s * s / (2 * (1 - s)) + 0.000855)


def test_one_client_never_waits() -> None:
    # At c = 1 nothing is running when its request arrives: no residual, wait or share.
    q = closed_loop(1, _closed(0.2, 0.018), BUDGET, DECODING)
    assert (float(q["residual"]), float(q["wait"]), float(q["share"])) == (0.0, 0.0, 0.0)
    assert float(q["ttft"]) == 0.2


def test_at_most_the_other_prompts_are_ahead() -> None:
    # E2E = 0.1 s: lambda = 2 / 0.1 = 20 per s, rho_b = 20 x 0.0948876 = 1.90 >= 1. An open
    # queue would grow without bound; 3 clients have at most 2 prompts ahead: 2 s.
    q = closed_loop(3, _closed(0.1, 0.0), BUDGET, DECODING)
    assert float(q["rho_b"]) > 1
    assert float(q["wait"]) == pytest.approx(2 * (1000 / 2046 * 0.01 + 0.09), rel=1e-12)


def test_the_open_loop_keeps_its_terms() -> None:
    # The same step costs at a Poisson rate of 1 per s: the wait is the closed loop's at
    # lambda = 1 (above); an open queue at rho_b >= 1 is unbounded. The residual is the
    # closed loop's 0.0095 s times the chance an arrival finds a request in flight: with
    # lambda E2E = 1 x 2 s = 2 in flight on average (Poisson), 1 - e^-2 = 0.864665.
    q = queueing(1.0, _closed(0.2, 0.018), BUDGET, DECODING)
    assert float(q["running"]) == pytest.approx(1 - np.exp(-2.0), rel=1e-12)
    assert float(q["residual"]) == pytest.approx(0.0095 * 0.8646647, rel=1e-6)
    s = 1000 / 2046 * 0.01 + 0.09
    assert float(q["wait"]) == pytest.approx(s * s / (2 * (1 - s)), rel=1e-12)
    assert np.isinf(queueing(20.0, _closed(0.1, 0.0), BUDGET, DECODING)["wait"])


def test_a_scheduler_that_looks_every_30_decode_steps() -> None:
    # poll_interval 30 (SGLang --scheduler-recv-interval 30), the three clients above
    # (lambda 1 per s, mixed steps 0.1 of the time): in pure decode the scheduler looks
    # every 30 x 0.01 = 0.3 s, so the residual is (0.1 x 0.1 + 0.9 x 0.3) / 2 = 0.14 s.
    q = closed_loop(3, _closed(0.2, 0.018, poll=30.0), BUDGET, DECODING)
    assert float(q["residual"]) == pytest.approx(0.14, rel=1e-12)
    # The wait is the budget's (unchanged); 1 x 0.14 x 1000 = 140 prompt tokens arrive
    # in the residual and join the step: 140 x 9e-5 = 0.0126 s.
    s = 1000 / 2046 * 0.01 + 0.09
    assert float(q["wait"]) == pytest.approx(s * s / (2 * (1 - s)), rel=1e-12)
    assert float(q["share"]) == pytest.approx(0.0126, rel=1e-12)
    # One client finds the scheduler idle, and an idle scheduler looks all the time.
    assert float(closed_loop(1, _closed(0.2, 0.018, poll=30.0), BUDGET, DECODING)["residual"]) == 0
