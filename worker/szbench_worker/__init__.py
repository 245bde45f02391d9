"""szbench worker: Celery tasks, the container runner and EEG staging."""
