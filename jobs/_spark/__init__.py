"""The Spark plumbing the entry points share: session, daemon, errors, exchange, scan, Delta."""
