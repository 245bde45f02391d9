"""Teams: people who share algorithms (members see and submit them; quotas count per team)."""
