"""Closed forms: params, memory, step bytes, FLOPs and time terms as sympy expressions in B, N, T, model params and hardware symbols."""
