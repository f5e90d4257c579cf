"""The synthetic store writer."""
