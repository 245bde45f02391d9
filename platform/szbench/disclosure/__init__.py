"""What a viewer may learn about held-out data, decided in one place.

A submitter controls what their container does with the held-out recording it reads, so
every figure, count, time and byte the platform shows about a run on held-out data is a
channel out of it. This package holds the rules, one idea per module, below every domain
that shows results (it imports only the models, the settings, the errors and the access
policy; pyproject.toml's import contracts keep it so):

- :mod:`~szbench.disclosure.facts`: the plain facts a decision rests on, read from the
  database: the dataset version's kind and level, and the rules of every phase that names it;
- :mod:`~szbench.disclosure.decision`: :func:`~szbench.disclosure.decision.decide`, the one
  decision point, and the :class:`~szbench.disclosure.decision.View` it returns;
- :mod:`~szbench.disclosure.release`: released figures (exact, rounded) and paired tests;
- :mod:`~szbench.disclosure.ladder`: the Ladder's released scores, per algorithm;
- :mod:`~szbench.disclosure.progress`: how a running evaluation is followed (the progress
  clock, coarse steps, rounded times);
- :mod:`~szbench.disclosure.bits`: what each of those can carry, in bits.
"""
