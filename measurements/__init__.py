"""GPU measurement scripts, each named by the question it answers; results under results/<question>/."""
