"""The router Lambda: the only door clients have into the system (ships alone in its zip)."""
