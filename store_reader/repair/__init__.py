"""The repaired store: written, placed, published, applied; salvage."""
