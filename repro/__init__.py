"""repro: tell where a multi-round LLM serving hang lives, with evidence."""

__version__ = "0.1.0"
