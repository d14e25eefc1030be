"""innet simulation: Python models (GPU, collectives, switch), co-simulation helpers, the CLI."""
