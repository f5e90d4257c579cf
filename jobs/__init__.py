"""Spark entry points (spark-submit) and the thin Spark transforms they share."""
