"""import-hf: Hugging Face config.json files read under limits, each family turned into an architecture, rendered as spec text."""
