"""Recipes of the docs as modules the tests import; each is a code block of its page, as is."""
