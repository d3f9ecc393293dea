"""Closed forms -> numbers without sympy: generated numpy code (the one exec), the Runner that evaluates it, the result JSON, and the on-disk cache of runners."""
