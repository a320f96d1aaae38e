"""The runners: the worker pool that claims, leases and runs tasks (`pool`), the
executor, step ledger and delegation that run them, and what every process runs
beside it: the heartbeat, reaper, scheduler and pruner; the claim loop (`claims`)
the pool and the webhook dispatcher (`webhook_dispatcher`) share, which know nothing
of each other (an import contract).
"""
