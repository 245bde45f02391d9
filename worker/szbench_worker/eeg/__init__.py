"""EEG I/O and standardisation to the SzCORE algorithm input, one idea per module.

- :mod:`~szbench_worker.eeg.labels`: the 19 electrodes, their output labels and rate, and how
  clinical channel labels map onto them.
- :mod:`~szbench_worker.eeg.edf_header`: the one EDF/BDF header reader (standard library only;
  the runners use it too).
- :mod:`~szbench_worker.eeg.edf_read`: EDF/BDF samples with numpy, a chunk at a time.
- :mod:`~szbench_worker.eeg.mne_read`: other formats through MNE (the only module importing it).
- :mod:`~szbench_worker.eeg.resample`: resampling to 256 Hz.
- :mod:`~szbench_worker.eeg.edf_write`: the streaming EDF+ writer that hashes what it writes.
- :mod:`~szbench_worker.eeg.standardise`: checking a recording and standardising it.
- :mod:`~szbench_worker.eeg.errors`: the errors, each naming the file.

Nothing is imported here, so that importing one module (the header reader) loads only what it
needs.
"""
