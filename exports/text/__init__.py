"""Plain-text, Markdown and CSV renderings of results (every number with its unit)."""
