"""PyTorch integration (placeholder until the custom ops land)."""
