"""Per-engine job scripts of ``bench/peers.py`` (each runs in its own engine's venv)."""
