"""What a broker does with its files: versions, dispatch, recovery, pull."""
