"""PNG plots: sweeps, capacity charts, the plan's Pareto front."""
