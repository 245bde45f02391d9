"""What workers on other hosts fetch from the platform (recordings by checksum)."""
