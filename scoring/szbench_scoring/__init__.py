"""SzCORE seizure-detection scoring on sorted interval arrays (numpy only)."""
