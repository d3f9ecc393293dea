"""Questions asked of the numbers: capacity, sweeps, sensitivity, serving and planning, disaggregation, speculative decoding, diagnosis of measurements, calibration."""
