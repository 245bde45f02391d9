"""Resampling to the SzCORE rate: the up/down ratio, and a faster whole-number decimation."""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
from scipy.ndimage import correlate1d
from scipy.signal import firwin, resample_poly

from szbench_worker.eeg.labels import TARGET_SFREQ_HZ


def resample_ratio(sfreq_hz: float) -> Fraction:
    """``up / down`` that takes ``sfreq_hz`` to 256 Hz.

    >>> resample_ratio(512), resample_ratio(200)
    (Fraction(1, 2), Fraction(32, 25))
    """
    ratio = Fraction(TARGET_SFREQ_HZ) / Fraction(sfreq_hz).limit_denominator(10_000)
    if max(ratio.numerator, ratio.denominator) > 4096:
        # An irrational-looking rate (e.g. 199.997 Hz): a nearby simple ratio is within the
        # clock accuracy of any EEG amplifier.
        ratio = ratio.limit_denominator(512)
    return ratio


def resample(x: np.ndarray, up: int, down: int) -> np.ndarray:
    """``resample_poly(x, up, down, axis=1)``, faster for the common whole-number decimations.

    512, 1024 or 2048 Hz to 256 Hz is a decimation by M with no upsampling. resample_poly's
    default filter (a Kaiser-windowed sinc with cutoff at the new Nyquist, 20M+1 taps) is then a
    Nyquist-M filter: every M-th tap away from the centre is zero. upfirdn multiplies by those
    zeros anyway; splitting the input into its M polyphase components and correlating each with
    its own taps skips them (about half the work for M = 2). Same filter, same alignment and
    same zero padding at the ends, so the output equals resample_poly's to rounding.
    """
    if up != 1 or down == 1:
        return np.asarray(resample_poly(x, up, down, axis=1))
    taps = _decimation_taps(down)
    n_out = -(-x.shape[1] // down)
    # The filter (20*down+1 taps) is centred on input sample down*k for output k:
    # out[k] = sum_s taps[s] * x[down*k + s - 10*down], zero outside the signal.
    # With s = down*q + r that is one correlation per residue r over x[:, r::down]; residue 0
    # holds only the centre tap.
    out: np.ndarray = x[:, ::down] * taps[10 * down]
    phase = np.zeros((x.shape[0], n_out))
    for r in range(1, down):
        weights = taps[r::down]
        part = x[:, r::down]
        phase[:, : part.shape[1]] = part
        phase[:, part.shape[1] :] = 0.0
        # correlate1d's window for output k starts at k - size//2 - origin; ours at k - 10.
        out += correlate1d(phase, weights, axis=1, mode="constant", origin=10 - weights.size // 2)
    return out


@functools.cache
def _decimation_taps(down: int) -> np.ndarray:
    # The filter resample_poly designs for (1, down): keep the two in step.
    return np.asarray(firwin(20 * down + 1, 1.0 / down, window=("kaiser", 5.0)))
