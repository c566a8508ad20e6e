"""The client: flags and config in, a submitted and followed YARN application out."""
