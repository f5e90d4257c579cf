"""The dump printers and checks (jobs.dump), Spark-free."""
