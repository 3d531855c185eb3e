"""hwtune's own attention kernels (Triton): TRITON_ATTN (``triton_attention``) and TURBOQUANT
(``turboquant``), with their tactics (``configs``) and the Hadamard rotation (``hadamard``).

Importing this package imports nothing heavy; the kernel modules import torch and triton. See
docs/kernels.md for the design and how correctness is checked.
"""
