"""Tests of the meshtrain Python client (unittest; see python/README.md)."""
