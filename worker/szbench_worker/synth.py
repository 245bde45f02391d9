"""Synthetic EEG in the SzCORE layout, for the demo and the tests.

Each recording is 19 channels at 256 Hz, common-average referenced, and holds:

- a spatially correlated 1/f background and a posterior alpha rhythm (8-12 Hz band noise, so it
  waxes and wanes like the real one);
- eye blinks: slow positive deflections, strongest at Fp1/Fp2, weaker over the frontal chain;
- muscle artifacts: bursts of high-frequency (above ~20 Hz) activity over one temporal region;
- seizures that start at one electrode with low-amplitude fast rhythmic discharges, then slow
  down while their amplitude rises (a chirp with a spike-like waveform) and spread to the
  neighbouring electrodes with a delay that grows with distance; some stay focal and faint,
  which is what makes them hard to detect.

Everything is generated in chunks of one minute, vectorised over channels, so an hour takes well
under a second and memory does not grow with the length. The same seed gives the same bytes.
EDF files are written through :mod:`szbench_worker.eeg.edf_write`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import signal

from szbench_worker.eeg.edf_write import EdfStreamWriter
from szbench_worker.eeg.labels import CHANNELS, OUTPUT_LABELS, TARGET_SFREQ_HZ

FS = TARGET_SFREQ_HZ
TASK = "szMonitoring"
_CHUNK_S = 60
_RANGE_UV = 2000.0  # EDF physical range of synthetic signals; nothing generated comes close

# Approximate scalp positions on a unit grid (x: left to right, y: back to front).
_POSITIONS = {
    "Fp1": (-1, 2), "Fp2": (1, 2),
    "F7": (-2, 1), "F3": (-1, 1), "Fz": (0, 1), "F4": (1, 1), "F8": (2, 1),
    "T3": (-2, 0), "C3": (-1, 0), "Cz": (0, 0), "C4": (1, 0), "T4": (2, 0),
    "T5": (-2, -1), "P3": (-1, -1), "Pz": (0, -1), "P4": (1, -1), "T6": (2, -1),
    "O1": (-1, -2), "O2": (1, -2),
}  # fmt: skip
_XY = np.array([_POSITIONS[name] for name in CHANNELS], dtype=float)
_DIST = np.linalg.norm(_XY[:, None, :] - _XY[None, :, :], axis=-1)
_ALPHA_WEIGHT = np.array(
    [{"O1": 1.0, "O2": 1.0, "P3": 0.6, "P4": 0.6, "Pz": 0.6, "T5": 0.5, "T6": 0.5}.get(c, 0.1)
     for c in CHANNELS]
)  # fmt: skip
_BLINK_WEIGHT = np.array(
    [{"Fp1": 1.0, "Fp2": 1.0, "F3": 0.35, "F4": 0.35, "Fz": 0.3, "F7": 0.3, "F8": 0.3}.get(c, 0.03)
     for c in CHANNELS]
)  # fmt: skip
_LEFT_TEMPORAL = np.array([CHANNELS.index(c) for c in ("F7", "T3", "T5")])
_RIGHT_TEMPORAL = np.array([CHANNELS.index(c) for c in ("F8", "T4", "T6")])


@dataclass(frozen=True)
class Seizure:
    """One synthetic seizure: where it starts, how it evolves and how far it spreads."""

    onset_s: float
    duration_s: float
    focus: str
    peak_uv: float
    start_hz: float
    end_hz: float
    spread_radius: float  # grid units; 0 stays at the focus, 4 reaches every electrode
    spread_s_per_unit: float


@dataclass(frozen=True)
class SynthRecording:
    """A generated recording: its files and what it contains."""

    subject: str
    session: str
    run: str
    eeg_path: Path
    events_path: Path
    duration_s: float
    seizures: tuple[Seizure, ...]


@dataclass(frozen=True)
class SynthDataset:
    """What :func:`generate_dataset` wrote."""

    root: Path
    recordings: tuple[SynthRecording, ...] = field(default_factory=tuple)

    @property
    def n_seizures(self) -> int:
        return sum(len(r.seizures) for r in self.recordings)


# --------------------------------------------------------------------------- filters


def _pink_sos() -> np.ndarray:
    """A filter whose power falls as 1/f from 0.5 to 100 Hz (alternating real poles and zeros)."""
    freqs = np.geomspace(0.5, 100, 8)
    step = math.sqrt(freqs[1] / freqs[0])
    poles = -2 * np.pi * freqs
    zeros = -2 * np.pi * freqs * step
    z, p, k = signal.bilinear_zpk(zeros, poles, 1.0, FS)
    return np.asarray(signal.zpk2sos(z, p, k))


_PINK = _pink_sos()
_SLOW = signal.butter(2, [0.5, 4.0], btype="bandpass", fs=FS, output="sos")
_ALPHA = signal.butter(2, [8.5, 11.5], btype="bandpass", fs=FS, output="sos")
_MUSCLE = signal.butter(4, [25.0, 90.0], btype="bandpass", fs=FS, output="sos")
_MIX = np.exp(-(_DIST**2) / (2 * 1.2**2))
_MIX /= np.linalg.norm(_MIX, axis=1, keepdims=True)


def _gain_at(sos: np.ndarray, freqs: np.ndarray) -> float:
    _, h = signal.sosfreqz(sos, worN=freqs, fs=FS)
    return float(np.sqrt(np.mean(np.abs(h) ** 2)))


# --------------------------------------------------------------------------- events


def _draw_seizures(
    rng: np.random.Generator, duration_s: float, per_hour: float
) -> tuple[Seizure, ...]:
    n = int(rng.poisson(per_hour * duration_s / 3600.0))
    margin = 60.0
    seizures: list[Seizure] = []
    for _ in range(n):
        length = float(rng.uniform(25, 110))
        if duration_s - 2 * margin - length <= 0:
            break
        for _attempt in range(20):
            onset = float(rng.uniform(margin, duration_s - margin - length))
            # Keep seizures well apart: the scorer would merge events closer than 90 s.
            if all(abs(onset - s.onset_s) > 240 + max(length, s.duration_s) for s in seizures):
                break
        else:
            continue
        # Peak amplitude spans faint (near the background) to florid; faint ones also spread
        # less, so some seizures are genuinely hard for a simple detector.
        peak = float(np.exp(rng.normal(np.log(100.0), 0.7)))
        radius = float(np.clip(rng.normal(0.5 + peak / 80.0, 0.6), 0.0, 4.5))
        seizures.append(
            Seizure(
                onset_s=round(onset, 1),
                duration_s=round(length, 1),
                focus=str(rng.choice(CHANNELS)),
                peak_uv=round(peak, 1),
                start_hz=float(rng.uniform(6.0, 9.0)),
                end_hz=float(rng.uniform(2.0, 3.5)),
                spread_radius=round(radius, 2),
                spread_s_per_unit=float(rng.uniform(2.0, 6.0)),
            )
        )
    return tuple(sorted(seizures, key=lambda s: s.onset_s))


def _seizure_signal(sz: Seizure, t0: int, n: int) -> tuple[slice, np.ndarray] | None:
    """The seizure's contribution to samples ``[t0, t0 + n)``, as (channel-free slice, data)."""
    start, stop = round(sz.onset_s * FS), round((sz.onset_s + sz.duration_s) * FS)
    lo, hi = max(start, t0), min(stop, t0 + n)
    if lo >= hi:
        return None
    tau = (np.arange(lo, hi) - start) / FS  # time since onset
    length = sz.duration_s
    # Frequency slides linearly from start_hz to end_hz; its integral gives the phase exactly,
    # so a chunk boundary never shows.
    phase = 2 * np.pi * (sz.start_hz * tau + (sz.end_hz - sz.start_hz) * tau**2 / (2 * length))
    wave = np.sin(phase) + 0.45 * np.sin(2 * phase + 0.6) + 0.2 * np.sin(3 * phase + 1.2)
    dist = _DIST[CHANNELS.index(sz.focus)]
    involved = dist <= sz.spread_radius + 1e-9
    delay = dist * sz.spread_s_per_unit
    rel = tau[None, :] - delay[:, None]  # time since the discharge reached each electrode
    ramp = np.clip(rel / (0.45 * length), 0.0, 1.0)
    # Low-amplitude fast activity at onset, growing to the peak; a short fade at the end.
    envelope = (0.15 + 0.85 * ramp**1.5) * (rel >= 0)
    envelope *= np.clip((length - tau) / 3.0, 0.0, 1.0)[None, :]
    atten = np.where(involved, 0.75**dist, 0.0)
    data = sz.peak_uv * atten[:, None] * envelope * wave[None, :]
    return slice(lo - t0, hi - t0), data


# --------------------------------------------------------------------------- recordings


def generate_recording(
    path: Path,
    *,
    duration_s: float,
    seed: int | list[int],
    seizures_per_hour: float = 1.5,
    start: dt.datetime | None = None,
) -> tuple[Seizure, ...]:
    """Write one synthetic recording (conformant EDF+) to ``path``; returns its seizures.

    ``duration_s`` is rounded down to whole seconds. The same ``seed`` gives the same file.
    """
    n_total = int(duration_s) * FS
    event_rng, noise_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    seizures = _draw_seizures(event_rng, n_total / FS, seizures_per_hour)
    blinks = np.sort(event_rng.uniform(0, n_total / FS, int(n_total / FS / 5)))
    blink_amp = event_rng.uniform(100, 250, blinks.size)
    n_muscle = int(event_rng.poisson(n_total / FS / 150))
    muscle_on = np.sort(event_rng.uniform(0, n_total / FS, n_muscle))
    muscle_len = event_rng.uniform(0.5, 8.0, n_muscle)
    muscle_amp = event_rng.uniform(10, 50, n_muscle)
    muscle_side = event_rng.integers(0, 2, n_muscle)
    # Drowsy rhythmic theta: brief, regional, seizure-like to a simple detector (a source of
    # false positives, as rhythmic benign variants are in real EEG).
    n_theta = int(event_rng.poisson(n_total / FS / 300))
    theta_on = event_rng.uniform(0, n_total / FS, n_theta)
    theta_len = event_rng.uniform(3, 20, n_theta)
    theta_hz = event_rng.uniform(4.0, 7.0, n_theta)
    theta_amp = event_rng.uniform(20, 70, n_theta)
    theta_focus = event_rng.integers(0, len(CHANNELS), n_theta)
    bg_uv = event_rng.uniform(20, 30)
    # Slow changes of vigilance: the background and alpha wax and wane over minutes.
    mod_period_s = event_rng.uniform(120, 1200, 4)
    mod_phase = event_rng.uniform(0, 2 * np.pi, 4)
    alpha_uv = event_rng.uniform(15, 30)

    zi_pink = np.zeros((_PINK.shape[0], len(CHANNELS), 2))
    zi_slow = np.zeros((_SLOW.shape[0], len(CHANNELS), 2))
    zi_alpha = np.zeros((_ALPHA.shape[0], 2))
    temporal = np.concatenate([_LEFT_TEMPORAL, _RIGHT_TEMPORAL])
    zi_muscle = np.zeros((_MUSCLE.shape[0], temporal.size, 2))
    pink_gain = _gain_at(_PINK, np.linspace(1, 30, 30))
    chunk = _CHUNK_S * FS
    sigma = 0.08 * FS
    with EdfStreamWriter(
        path,
        labels=OUTPUT_LABELS,
        physical_min=[-_RANGE_UV] * len(CHANNELS),
        physical_max=[_RANGE_UV] * len(CHANNELS),
        n_records=n_total // FS,
        start=start,
    ) as writer:
        for t0 in range(0, n_total, chunk):
            n = min(chunk, n_total - t0)
            white = noise_rng.standard_normal((len(CHANNELS), n))
            pink, zi_pink = signal.sosfilt(_PINK, white, axis=-1, zi=zi_pink)
            slow, zi_slow = signal.sosfilt(
                _SLOW, noise_rng.standard_normal((len(CHANNELS), n)), axis=-1, zi=zi_slow
            )
            t = np.arange(t0, t0 + n)
            state = np.exp(
                0.15
                * np.sin(
                    2 * np.pi * t[None, :] / (mod_period_s[:, None] * FS) + mod_phase[:, None]
                ).sum(0)
            )
            x = _MIX @ (pink * (bg_uv / pink_gain) + slow * bg_uv * 1.5) * state
            # One alpha generator behind the posterior electrodes, so they are coherent.
            alpha, zi_alpha = signal.sosfilt(_ALPHA, noise_rng.standard_normal(n), zi=zi_alpha)
            x += _ALPHA_WEIGHT[:, None] * (alpha / state)[None, :] * (alpha_uv * 4.0)
            # Eye blinks: a 0.3 s Gaussian bump each.
            first = np.searchsorted(blinks * FS, t0 - 4 * sigma)
            last = np.searchsorted(blinks * FS, t0 + n + 4 * sigma)
            for centre, amp in zip(blinks[first:last] * FS, blink_amp[first:last], strict=True):
                lo, hi = max(t0, int(centre - 4 * sigma)), min(t0 + n, int(centre + 4 * sigma))
                bump = amp * np.exp(-0.5 * ((t[lo - t0 : hi - t0] - centre) / sigma) ** 2)
                x[:, lo - t0 : hi - t0] += _BLINK_WEIGHT[:, None] * bump[None, :]
            # Muscle: high-frequency noise gated by the bursts over one temporal region.
            # Only the temporal electrodes ever carry muscle: filter noise for those alone.
            hf = np.zeros((len(CHANNELS), n))
            hf[temporal], zi_muscle = signal.sosfilt(
                _MUSCLE, noise_rng.standard_normal((temporal.size, n)), axis=-1, zi=zi_muscle
            )
            for on, length, amp, side in zip(
                muscle_on, muscle_len, muscle_amp, muscle_side, strict=True
            ):
                lo, hi = max(t0, int(on * FS)), min(t0 + n, int((on + length) * FS))
                if lo < hi:
                    rows = _LEFT_TEMPORAL if side == 0 else _RIGHT_TEMPORAL
                    x[rows, lo - t0 : hi - t0] += amp * 2.5 * hf[rows, lo - t0 : hi - t0]
            for on, length, hz, amp, focus in zip(
                theta_on, theta_len, theta_hz, theta_amp, theta_focus, strict=True
            ):
                lo, hi = max(t0, int(on * FS)), min(t0 + n, int((on + length) * FS))
                if lo < hi:
                    tau = (t[lo - t0 : hi - t0] - on * FS) / FS
                    burst = amp * np.sin(np.pi * tau / length) * np.sin(2 * np.pi * hz * tau)
                    weight = np.exp(-(_DIST[focus] ** 2) / 2.0)
                    x[:, lo - t0 : hi - t0] += weight[:, None] * burst[None, :]
            for sz in seizures:
                part = _seizure_signal(sz, t0, n)
                if part is not None:
                    x[:, part[0]] += part[1]
            x -= x.mean(axis=0, keepdims=True)
            writer.write(x)
        writer.close()
    return seizures


def _events_tsv(seizures: tuple[Seizure, ...], duration_s: float, start: dt.datetime) -> str:
    header = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
    rows = []
    if not seizures:
        rows.append(
            f"0.0\t{duration_s:.1f}\tbckg\tn/a\tn/a\t{start:%Y-%m-%d %H:%M:%S}\t{duration_s:.1f}\n"
        )
    for sz in seizures:
        # SzCORE's dateTime is the start of the recording on every row.
        rows.append(
            f"{sz.onset_s:.1f}\t{sz.duration_s:.1f}\tsz\tn/a\tn/a\t"
            f"{start:%Y-%m-%d %H:%M:%S}\t{duration_s:.1f}\n"
        )
    return header + "".join(rows)


def generate_dataset(
    out: str | Path,
    *,
    subjects: int = 2,
    hours: float = 1.0,
    recording_minutes: float = 60.0,
    seed: int = 0,
    seizures_per_hour: float = 1.5,
    progress: Callable[[int, int], None] | None = None,
) -> SynthDataset:
    """Write a synthetic dataset in the SzCORE BIDS layout under ``out``.

    Each of ``subjects`` subjects gets ``hours`` of EEG split into recordings of
    ``recording_minutes`` (at least 10 minutes, as the SzCORE input requires) in
    ``sub-XX/ses-01/eeg/sub-XX_ses-01_task-szMonitoring_run-YY_eeg.edf`` with its
    ``_events.tsv``. ``progress(done, total)`` is called after each recording.
    The same arguments give the same files, byte for byte.
    """
    if subjects < 1:
        raise ValueError("subjects must be at least 1")
    if recording_minutes < 10:
        raise ValueError("recording_minutes must be at least 10 (the SzCORE minimum)")
    if hours * 60 < recording_minutes:
        raise ValueError(f"hours ({hours}) is shorter than one recording ({recording_minutes} min)")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    n_runs = max(1, round(hours * 60 / recording_minutes))
    duration_s = float(int(recording_minutes * 60))
    (root / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": f"szbench synthetic EEG (seed {seed})",
                "BIDSVersion": "1.9.0",
                "DatasetType": "raw",
                "GeneratedBy": [{"Name": "szbench synth"}],
            },
            indent=2,
        )
        + "\n"
    )
    participants = ["participant_id"]
    recordings: list[SynthRecording] = []
    total, done = subjects * n_runs, 0
    for s in range(subjects):
        subject = f"sub-{s + 1:02d}"
        participants.append(subject)
        folder = root / subject / "ses-01" / "eeg"
        folder.mkdir(parents=True, exist_ok=True)
        for r in range(n_runs):
            run = f"run-{r:02d}"
            stem = f"{subject}_ses-01_task-{TASK}_{run}"
            start = dt.datetime(2024, 1, 1, 8) + dt.timedelta(days=s, seconds=r * duration_s)
            eeg_path = folder / f"{stem}_eeg.edf"
            seizures = generate_recording(
                eeg_path,
                duration_s=duration_s,
                seed=[seed, s, r],
                seizures_per_hour=seizures_per_hour,
                start=start,
            )
            events_path = folder / f"{stem}_events.tsv"
            events_path.write_text(_events_tsv(seizures, duration_s, start))
            recordings.append(
                SynthRecording(subject, "ses-01", run, eeg_path, events_path, duration_s, seizures)
            )
            done += 1
            if progress is not None:
                progress(done, total)
    (root / "participants.tsv").write_text("\n".join(participants) + "\n")
    return SynthDataset(root=root, recordings=tuple(recordings))
