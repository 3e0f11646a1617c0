"""Reference implementations behind the llmserve curriculum.

Every module is one concept from LLM inference and serving, written to be read,
and every page of the site shows code from here.
"""

__version__ = "0.1.0"
