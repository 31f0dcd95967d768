"""cardgen: benchmark an LLM inference server and publish what it measures as a model card."""

__version__ = "0.1.0"
