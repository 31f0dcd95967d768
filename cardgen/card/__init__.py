"""card."""
