"""The worker that executes untrusted candidate code, and its isolation policy."""
