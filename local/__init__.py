"""The embedded platform: the whole system on one machine, no AWS (ARCHITECTURE.md section 7)."""
