"""The judge: the three-stage gate (compile → correctness → performance), output comparison,
DSL attribution and scoring. Untrusted code runs only in the sandbox worker (sandbox/)."""
