"""`file --ray` and `bench --ray`: the same decoding spread over a Ray cluster.

    address.py   what --ray takes (nothing, local, auto, ray://HOST:PORT, HOST:PORT)
    connect.py   joining or starting the cluster (Ray imported only here, only then); what it is
    driver.py    the Ray driver in a process of its own: the command outlives its death
    models.py    the driver's model, by name and per-file sha256; each worker verifies its copy
    outputs.py   files a task writes: atomic placement, exactly once, attempt markers
    tasks.py     submitting tasks, progress as they finish, retries counted, Ctrl-C cancels
    files.py     `file --ray`: one task per input file, outputs written by the task
    shards.py    `bench --ray`: one task per shard of utterances, rows merged by id

Nothing in this package imports Ray at module level: `import streamasr` and every command
without --ray never pay for it; with --ray, only the driver process imports it.
"""
