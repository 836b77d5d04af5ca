"""Run memory for the optimisation loop: store, server-verified iterations, acceptance rule,
dropout (partial restart) and audit."""
