"""The restart-safe runner for long-running remote objects: MPIJobs and Katib Experiments (created, watched until
they finish) and KServe InferenceServices (long-lived: created or updated by each deploy, watched until Ready).

One state machine for every kind:

    apply      on_exists="attach" (jobs): the reference file's object, else the one with the deterministic name
               (its owner labels must say it is this run's task), else create it; write the reference file.
               on_exists="update" (objects that outlive a run): the reference file's object when its generation is
               still the one our write produced (re-attach), else GET it (it must be labelled
               app.kubernetes.io/managed-by=slipway), remember its spec for rollback, write an intent record, PUT
               the new body with its resourceVersion (409: re-read, retry), write the reference file; or create it.
    wait       poll with backoff (transient API errors retried) until the kind's TerminalRule says succeeded or
               failed; after an update, only a status that describes our write counts (freshness).
    end        success: jobs deleted per delete_policy, long-lived objects kept. Failure, timeout, SIGTERM/SIGINT:
               jobs deleted (timeout, signal) or per policy (failure); an object we created deleted unless
               delete_policy is "never"; an object we updated rolled back to its previous spec (never deleted:
               it is someone's live endpoint). revert() does the same later (a smoke test failing after Ready).

What is kind-specific is data: a TerminalRule (which conditions and status values mean success or failure, how to
tell a status is fresh, where the primary pod's log is), defined beside its kind (slipway.core.training.mpijob,
slipway.components.tune.katib, slipway.components.deploy.inference_service) and registered (rules.register). The
Kubernetes calls sit behind ResourceClient (slipway/core/kube/client.py is the real one; tests use an in-memory
fake that behaves like the API server).

The package: naming (references, job names, owner labels), rules (TerminalRule and the registry), api (the client
protocol, polling, API errors), reference (the reference file), changes (safe writes, rollback, log tails), job (the
state machine: run). Callers use the names re-exported here: `from slipway.core import launcher; launcher.run(...)`.
"""

from slipway.core.kube.launcher.api import (
    CLEANUP_ATTEMPTS,
    TRANSIENT_STATUSES,
    Api,
    Poll,
    ResourceClient,
    api_status,
    describe_api_error,
    is_transient,
    permission_denied,
)
from slipway.core.kube.launcher.changes import (
    LOG_TAIL_LINES,
    MAX_CONFLICT_RETRIES,
    dropped_fields,
    modify,
    one_line_tail,
    revert,
)
from slipway.core.kube.launcher.job import DELETE_POLICIES, ON_EXISTS, Interrupted, job_age_s, parse_timestamp, run
from slipway.core.kube.launcher.naming import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_LABELS,
    RUN_ID_LABEL,
    TASK_LABEL,
    ResourceRef,
    is_dns1123_label,
    job_name,
    label_value,
    owner_labels,
)
from slipway.core.kube.launcher.reference import (
    CREATED,
    CREATING,
    REVERTED,
    UPDATED,
    UPDATING,
    Applied,
    read_applied,
    read_reference,
    remote_job_reference,
    write_reference,
)
from slipway.core.kube.launcher.rules import (
    FAILED,
    FRESHNESS,
    RULES,
    SUCCEEDED,
    StatusMatch,
    TerminalRule,
    condition_message,
    current_state,
    find_condition,
    format_condition,
    last_condition,
    register,
    rule_for,
    status_value,
)

__all__ = [
    "CLEANUP_ATTEMPTS", "CREATED", "CREATING", "DELETE_POLICIES", "FAILED", "FRESHNESS", "LOG_TAIL_LINES",
    "MANAGED_BY", "MANAGED_BY_LABEL", "MAX_CONFLICT_RETRIES", "ON_EXISTS", "OWNER_LABELS", "REVERTED", "RULES",
    "RUN_ID_LABEL", "SUCCEEDED", "TASK_LABEL", "TRANSIENT_STATUSES", "UPDATED", "UPDATING", "Api", "Applied",
    "Interrupted", "Poll", "ResourceClient", "ResourceRef", "StatusMatch", "TerminalRule", "api_status",
    "condition_message", "current_state", "describe_api_error", "dropped_fields", "find_condition",
    "format_condition", "is_dns1123_label", "is_transient", "job_age_s", "job_name", "label_value",
    "last_condition", "modify", "one_line_tail", "owner_labels", "parse_timestamp", "permission_denied",
    "read_applied", "read_reference", "register", "remote_job_reference", "revert", "rule_for", "run",
    "status_value", "write_reference",
]
