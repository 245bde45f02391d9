"""An SzCORE detector that runs an ONNX model with ONNX Runtime (CPU, or CUDA when present).

Per channel and 10 s window it computes three features (line length, 2.5-12 Hz power and
25-60 Hz power, each log-transformed and robustly z-scored against the recording itself),
asks the model for a seizure probability per channel and window, keeps the second-highest
probability across channels (a seizure involves a region, an artifact often one electrode)
and reports runs of windows above 0.5 as events.
"""

import os
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

MODEL = Path(__file__).with_name("model.onnx")
FEATURES = "line_length_z,rhythmic_power_z,fast_power_z"
THRESHOLD = 0.5
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration"
# The per-signal header fields of EDF and their widths in bytes.
FIELDS = [
    "label",
    "transducer",
    "unit",
    "pmin",
    "pmax",
    "dmin",
    "dmax",
    "prefilter",
    "samples",
    "reserved",
]
WIDTHS = [16, 80, 8, 8, 8, 8, 8, 80, 8, 32]


def read_edf(path):
    """Return (signals in µV, (channels, samples) float32; fs in Hz; start; duration in s)."""
    raw = path.read_bytes()
    n_records, record_s = int(raw[236:244]), float(raw[244:252])
    n_signals, pos, header = int(raw[252:256]), 256, {}
    for name, width in zip(FIELDS, WIDTHS, strict=True):
        header[name] = [
            raw[pos + i * width : pos + (i + 1) * width].decode().strip() for i in range(n_signals)
        ]
        pos += width * n_signals
    samples = [int(n) for n in header["samples"]]
    records = np.frombuffer(raw, "<i2", offset=pos).reshape(n_records, sum(samples))
    eeg, start = [], 0
    for i, n in enumerate(samples):
        if header["label"][i] != "EDF Annotations":
            pmin, pmax, dmin, dmax = (float(header[k][i]) for k in ("pmin", "pmax", "dmin", "dmax"))
            digital = records[:, start : start + n].ravel().astype(np.float32)
            eeg.append((digital - dmin) * np.float32((pmax - pmin) / (dmax - dmin)) + pmin)
        start += n
    day, month, year = raw[168:176].decode().split(".")
    clock = raw[176:184].decode().replace(".", ":")
    return (
        np.array(eeg),
        samples[0] / record_s,
        f"20{year}-{month}-{day} {clock}",
        n_records * record_s,
    )


def robust_z(values):
    """(x - median) / (1.4826 MAD) along the windows axis, clipped: one recording, one scale."""
    median = np.median(values, axis=0)
    mad = 1.4826 * np.median(np.abs(values - median), axis=0) + 1e-6
    return np.clip((values - median) / mad, -20.0, 20.0)


def features(signals, fs, window_s):
    """(windows, channels, 3) float32 features, one channel at a time to bound memory."""
    window = int(window_s * fs)
    n_windows = signals.shape[1] // window
    freqs = np.fft.rfftfreq(window, 1 / fs)
    rhythmic = (freqs >= 2.5) & (freqs < 12)
    fast = (freqs >= 25) & (freqs < 60)
    taper = np.hanning(window).astype(np.float32)
    out = np.empty((n_windows, len(signals), 3), dtype=np.float32)
    for ch, signal in enumerate(signals):
        windows = signal[: n_windows * window].reshape(n_windows, window)
        power = np.abs(np.fft.rfft((windows - windows.mean(axis=1, keepdims=True)) * taper)) ** 2
        raw = np.stack(
            [
                np.abs(np.diff(windows, axis=1)).mean(axis=1),
                power[:, rhythmic].sum(axis=1),
                power[:, fast].sum(axis=1),
            ],
            axis=1,
        )
        out[:, ch, :] = robust_z(np.log(raw + 1e-6))
    return out


def session():
    """An inference session: CUDA when this onnxruntime has it and a GPU is visible, else CPU."""
    options = ort.SessionOptions()
    # onnxruntime sizes its thread pool by the host's cores, not the container's CPU limit;
    # OMP_NUM_THREADS, when the platform sets it, is that limit.
    options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS") or 1)
    options.inter_op_num_threads = 1
    wanted = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    providers = [p for p in wanted if p in ort.get_available_providers()]
    if "CUDAExecutionProvider" in providers:
        # onnxruntime-gpu: load the CUDA and cuDNN libraries of the nvidia-* wheels from
        # site-packages (they are on no library path); the driver comes from the host.
        ort.preload_dlls()
    sess = ort.InferenceSession(str(MODEL), sess_options=options, providers=providers)
    meta = sess.get_modelmeta().custom_metadata_map
    if meta.get("features") != FEATURES:
        sys.exit(f"{MODEL.name}: expects features {meta.get('features')!r}, not {FEATURES!r}")
    print(f"onnxruntime {ort.__version__}, providers {sess.get_providers()}", file=sys.stderr)
    return sess, float(meta.get("window_s", 10))


def main():
    sess, window_s = session()
    signals, fs, start, duration = read_edf(Path("/data") / os.environ["INPUT"])
    feats = features(signals, fs, window_s)
    n_windows, n_channels, _ = feats.shape
    (prob,) = sess.run(["probability"], {"features": feats.reshape(-1, 3)})
    prob = np.sort(prob.reshape(n_windows, n_channels), axis=1)[:, -2]
    rows, w = [], 0
    while w < n_windows:  # each run of windows above the threshold is one event
        if prob[w] <= THRESHOLD:
            w += 1
            continue
        end = w
        while end + 1 < n_windows and prob[end + 1] > THRESHOLD:
            end += 1
        confidence = float(prob[w : end + 1].max())
        onset, length = w * window_s, (end + 1 - w) * window_s
        rows.append(
            f"{onset:.1f}\t{length:.1f}\tsz\t{confidence:.3f}\tn/a\t{start}\t{duration:.1f}"
        )
        w = end + 1
    if not rows:
        rows.append(f"0.0\t{duration:.1f}\tbckg\tn/a\tn/a\t{start}\t{duration:.1f}")
    out = Path("/output") / os.environ["OUTPUT"]
    out.write_text("\n".join([HEADER, *rows]) + "\n")
    print(f"{len(rows)} row(s) from {n_windows} windows", file=sys.stderr)


if __name__ == "__main__":
    main()
