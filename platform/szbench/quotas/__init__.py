"""Per-user quotas on submissions and held-out evaluations."""
