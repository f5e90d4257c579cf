"""Files and bytes on a local or remote filesystem: nothing RocketMQ."""
