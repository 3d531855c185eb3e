"""Attention probes: one candidate module per runnable backend, the batch problem, the float32
reference, the correctness gate and the in-worker measurement job."""
