"""Judging on a Dask cluster: shards of a candidate set, or single tool calls, sent to workers
that each own one GPU and run the same sandboxed evaluation as the local path.

* `engine`: reaching a scheduler (`tcp://HOST:8786`) or starting one on this host (`local[:N]`).
* `shards`: the job spec that crosses to a worker and the function the worker runs.
* `dispatch`: `bench eval --cluster`: shards out, per-shard results in, merged per operator.
* `remote`: one server tool call on a cluster GPU, with progress and cancellation.

Trust: the hosts running Dask workers are trusted judge hosts (they read the hidden problem
files); the sandboxed candidate processes the evaluator starts under them are not.
"""
