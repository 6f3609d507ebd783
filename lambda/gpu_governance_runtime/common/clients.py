"""The retry configurations of the controllers' AWS clients, one per purpose.

botocore's retry settings decide whether a request may reach AWS twice, so each is chosen for
what the calls do, and named for it, rather than per module. ``retries.max_attempts`` counts the
retries after the first request, ``total_max_attempts`` every request.
"""

from __future__ import annotations

from botocore.config import Config

# Reads and actions within one reclaim tick. Standard mode backs off on throttling
# (TooManyRequestsException, ThrottlingException); short timeouts keep one call well inside an
# action's time (the adapters' ``action_seconds``), and the function's within its minute.
WITHIN_A_TICK = Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=3, read_timeout=5)

# Calls that state a desired configuration (the HyperPod dedicated-nodes custom resource's
# UpdateCluster): resending one is harmless, so throttling and transient errors are retried
# generously before a deployment fails.
DESIRED_STATE = Config(retries={"mode": "standard", "total_max_attempts": 8})

# The capacity controller's reads and its idempotent writes: botocore's own defaults (the
# AWS_RETRY_MODE / AWS_MAX_ATTEMPTS of the environment apply), a run comes back every schedule.
CAPACITY_READS = Config()

# Purchases (PurchaseCapacityBlock, PurchaseCapacityBlockExtension, CreateTrainingPlan): exactly
# one request. botocore would resend after a 5xx or a timeout that may have followed a successful
# purchase, buying twice; instead the ledger's intent records the call and the reconciler finds
# out from the listings what happened. The long read timeout gives AWS time to answer once.
PURCHASE = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=10, read_timeout=30)

# Cost Explorer (the capacity controller's daily read of each team's spend, capacity/spend.py): a
# request costs USD 0.01, so few attempts; standard mode, because Cost Explorer throttles with
# LimitExceededException, which botocore's legacy mode does not retry. Short timeouts keep the
# read within what is left of the capacity run (spend.CALL_SECONDS).
COST_EXPLORER = Config(retries={"mode": "standard", "total_max_attempts": 3}, connect_timeout=5, read_timeout=20)

# SubmitJob of a stopped job's copy (common/batch_copy.py): exactly one request. SubmitJob has no
# idempotency token, so a resend after a timeout or 5xx that followed an accepted request makes
# Batch run the job twice; instead the caller's ledger records the request and the next run looks
# for the copy by its tag. Timeouts fit within an action of a reclaim tick.
SUBMIT_ONCE = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=3, read_timeout=10)

# PutEvents of a notice the ledger records as sent (reclaim/gpu_hours.py): exactly one request. EventBridge
# makes an event of every entry it receives [aws: events.put-events-each-entry], so a resend after a lost
# answer would notify twice; instead a send that fails leaves its claim, which a later tick takes and sends.
SEND_ONCE = Config(retries={"mode": "standard", "total_max_attempts": 1}, connect_timeout=3, read_timeout=5)
