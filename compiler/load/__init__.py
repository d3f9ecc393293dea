"""Files in: specs and their imports resolved and parsed, hardware blocks read into fields."""
