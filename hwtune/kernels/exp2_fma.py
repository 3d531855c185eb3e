"""An experiment, off by default: half of each unmasked prefill tile's softmax exponentials computed by a polynomial
on the FMA units instead of the special-function unit (FlashAttention-4's trick on Blackwell), for
``triton_attention._paged_attn_kernel``.

WHY it may pay on Hopper: a 128 x 128 tile of head 128 costs the tensor cores about 1024 cycles of an SM (two dots of
4.2 MFLOP at about 4096 FLOP a cycle) and the special-function unit as many (16384 ``ex2`` at 16 a cycle), and Triton
3.6 on Hopper does not overlap a tile's softmax with its dots the way fa3's warp-specialised ping-pong does, so the
two add up. Moving half of the ``ex2`` to the FMA pipe (about 7 FMA-pipe instructions each, at 128 lanes a cycle)
lets both pipes work at once. Unmeasured until ``EXP2_ON_FMA`` is measured on a GPU
(``benchmarks/experiments/exp2_fma.py``); it stays off until then.

The polynomial: ``2^x = 2^j * p(f)`` with ``j = floor(x)``, ``f = x - j`` in [0, 1), ``p`` the cubic with ``p(0) = 1``
fitted for the least maximum relative error on [0, 1) (8.6e-5, against bf16's 3.9e-3 rounding of the probabilities
that feed the second dot); ``2^j`` is added to the float's exponent bits. Arguments are clamped at -126 (a probability
of 1.2e-38 against the row maximum's 1, where ``ex2`` gives 0 or a denormal).
"""

from __future__ import annotations

import triton
import triton.language as tl

#: Whether prefill-style launches compute every second column of an unmasked tile's exponentials on the FMA units
#: (``exp2_split``). Off: not measured yet (module docstring). Read at each launch (``exp2_on_fma``), so an
#: experiment may switch it between launches.
EXP2_ON_FMA = False

#: ``p(f) = 1 + f * (C1 + f * (C2 + f * C3))`` (module docstring)
C1 = tl.constexpr(0.69511634)
C2 = tl.constexpr(0.227647)
C3 = tl.constexpr(0.0770652)


def exp2_on_fma(*, prefill_style: bool) -> bool:
    """Whether a launch takes the FMA exponentials: prefill-style launches while ``EXP2_ON_FMA`` is set (decode is
    bound by memory, not by the special-function unit)."""
    return EXP2_ON_FMA and prefill_style


@triton.jit
def exp2_poly(x):
    """``2^x`` for ``x <= 0`` on the FMA and integer units (module docstring); ``x`` below -126 gives 2^-126."""
    x = tl.maximum(x, -126.0)
    j = tl.floor(x)
    f = x - j
    p = 1.0 + f * (C1 + f * (C2 + f * C3))
    bits = p.to(tl.int32, bitcast=True) + (j.to(tl.int32) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def exp2_split(x, ON_FMA: tl.constexpr):
    """``2^x`` of a [rows, columns] tile of ``x <= 0``: with ``ON_FMA`` every second column by ``exp2_poly`` (a pair
    of adjacent columns lies in one thread's registers in the dot's layout), else all by ``tl.exp2``."""
    if ON_FMA:
        even, odd = tl.split(tl.reshape(x, [x.shape[0], x.shape[1] // 2, 2]))
        return tl.reshape(tl.join(tl.exp2(even), exp2_poly(odd)), [x.shape[0], x.shape[1]])
    else:
        return tl.exp2(x)
