"""Sequencer: the only place versions are assigned and request ids are banned."""
