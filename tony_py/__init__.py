"""TonY-py: distributed TensorFlow and PyTorch training as a native Hadoop YARN application."""

__version__ = "0.1.0"
