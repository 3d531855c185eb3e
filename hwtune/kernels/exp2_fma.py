"""An experiment, off by default: half of each unmasked prefill tile's softmax exponentials computed by a polynomial
on the FMA units instead of the special-function unit (FlashAttention-4's trick on Blackwell), for
``triton_attention._paged_attn_kernel``.

WHY it may pay on Hopper: a 128 x 128 tile of head 128 costs the tensor cores about 2048 cycles of an SM (two dots of
4.2 MFLOP at about 4096 FLOP a cycle) and the special-function unit about half that (16384 ``ex2`` at 16 a cycle), and
Triton 3.6 on Hopper does not overlap a tile's softmax with its dots the way fa3's warp-specialised ping-pong does, so
they add up. Moving half of the ``ex2`` to the FMA and integer pipes (8 instructions each, at 64-128 lanes a cycle)
lets those pipes and the special-function unit work at once. Unmeasured until ``EXP2_ON_FMA`` is timed on a GPU
(``benchmarks/experiments/exp2_fma.py``); it stays off until then.

The polynomial (FlashAttention-4's ``ex2_emulation``, without its inline assembly): ``2^x = 2^n * p(f)`` with ``n`` the
nearest integer to ``x`` and ``f = x - n`` in [-0.5, 0.5]. Adding 1.5 * 2^23 to ``x`` rounds it to an integer held in
the float's low mantissa bits (``t``), so neither a floor nor a float-to-integer conversion is needed (both would run on
the conversion pipe, like ``ex2``); ``p`` is a cubic fitted for the least maximum relative error (7.5e-5 over every
float32 in [-125, 0], against bf16's 3.9e-3 rounding of the probabilities that feed the second dot), and ``2^n`` is
added to its exponent bits (``t``'s bits shifted up by 23 are ``n << 23``). Arguments are clamped at -125 (a
probability of 2.4e-38 against the row maximum's 1, where ``ex2`` gives 0 or a denormal). On the GPU a NaN argument
clamps to -125 (``max.f32``), where ``ex2`` and the interpreter give NaN; the unmasked path never has one.
"""

from __future__ import annotations

import triton
import triton.language as tl

#: Whether prefill-style launches compute every second column of an unmasked tile's exponentials on the FMA units
#: (``exp2_split``). Off: not measured yet (module docstring). Read at each launch (``exp2_on_fma``), so an
#: experiment may switch it between launches.
EXP2_ON_FMA = False

#: ``p(f) = K0 + f * (K1 + f * (K2 + f * K3))`` on [-0.5, 0.5] (module docstring)
K0 = tl.constexpr(0.99992806)
K1 = tl.constexpr(0.69326097)
K2 = tl.constexpr(0.24261132)
K3 = tl.constexpr(0.05517175)
#: 1.5 * 2^23: a float32 in [2^23, 2^24) has no fraction bits, so adding it rounds to an integer in the low mantissa
ROUNDER = tl.constexpr(12582912.0)


def exp2_on_fma(*, prefill_style: bool) -> bool:
    """Whether a launch takes the FMA exponentials: prefill-style launches while ``EXP2_ON_FMA`` is set (decode is
    bound by memory, not by the special-function unit)."""
    return EXP2_ON_FMA and prefill_style


@triton.jit
def exp2_poly(x):
    """``2^x`` for ``x <= 0`` on the FMA and integer units (module docstring); ``x`` below -125 gives 2^-125."""
    x = tl.maximum(x, -125.0)
    t = x + ROUNDER  # round(x) in the low mantissa bits
    f = x - (t - ROUNDER)
    p = K0 + f * (K1 + f * (K2 + f * K3))
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
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
