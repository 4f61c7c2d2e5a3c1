"""Metric keys, defined once. Per-round keys are logged with step=round; `final.*`/`total.*` summaries once per run.

Client-level keys are what a client job reports to the runtime, which turns them into the round's keys.
"""

# -- client level: a job's metrics and predictions, read by the runtime ----------------------------------
TRAIN_LOSS = "train_loss"
"""Mean batch loss of a fit job (NaN for a job that did not train)."""
TRAIN_STEPS = "train_steps"
TRAIN_SAMPLES = "train_samples"
"""The client's training-set size, by which 004's pi-weighted accuracy weighs its local accuracy."""
FIT_KEYS = (TRAIN_LOSS, TRAIN_STEPS, TRAIN_SAMPLES)
"""What any method's fit job may report; a method's own keys it declares (`Algorithm.client_metrics`)."""
CLIENT_METRIC_PREFIX = "client_"
"""A declared client metric `k` is recorded per round as `client_<k>_mean`, the mean over the clients that reported
it (`fedbench.runtime.records.training_metrics`)."""
ACCURACY = "accuracy"
LOSS = "loss"
TEST_SAMPLES = "test_samples"
SYSTEM_SAMPLES = "system_samples"
"""Test samples of a client that the system answered (004 Sec. 5's system accuracy)."""
SYSTEM_CORRECT = "system_correct"
"""Of those, the ones the system answered right."""
ROUTED_HOME = "routed_home"
"""Test samples a router sent back to the client they came from."""
PRED = "pred"
"""`client_predict` output: int64 [n_test] predicted classes."""
ROUTE = "route"
"""`client_predict` output of methods with a router: float [n_test, num_clients] routing scores."""

# -- round level --------------------------------------------------------------------------------------------
ROUND = "round"
"""The round a record describes (1-based), the step its metrics are logged at."""
TRAIN_LOSS_MEAN = "train_loss_mean"
ACC_LOCAL_MEAN = "acc_local_mean"
ACC_LOCAL_STD = "acc_local_std"
ACC_LOCAL_MIN = "acc_local_min"
ACC_LOCAL_WEIGHTED = "acc_local_weighted"
ACC_LOCAL_PI_WEIGHTED = "acc_local_pi_weighted"
"""Local accuracies weighted by each client's share pi_i of the training data (004's "average accuracy")."""
ACC_LOCAL_MEAN_TRAINED = "acc_local_mean_trained"
"""Gossip's last local accuracy (mean over clients) of each client's model after its training (`evaluated: trained`),
also read beside an `evaluated: mixed` run (`SecondReading`: neither metered nor counted as its compute, its seconds
in the last round's wall time); under `trained` it is `acc_local_mean`."""
ACC_LOCAL_MEAN_MIXED = "acc_local_mean_mixed"
"""The same of each client's model averaged with its next partner's (`evaluated: mixed`), also read beside a `trained`
run; under `mixed` it is `acc_local_mean`."""
LOSS_LOCAL_WEIGHTED = "loss_local_weighted"
"""Local test (validation) loss over clients weighted by test-set size: Flower's distributed loss, by which 002's
FedAvg picks the round it reports (`RunSpec.scored_round`)."""
SCORED_ROUND = "round_scored"
"""The round whose model the final test-time and system scores come from (`RunSpec.scored_round`); named apart
from the field, so that a run's table has one column of each."""
ACC_TEST_TIME = "acc_test_time"
"""Mean accuracy over the test-time clients, each with the payload `assign` gave it (002 Sec. 3.3)."""
ACC_TEST_TIME_INDEX = "acc_test_time_index"
"""The same under the same-index association (test client i given training client i's personal model, what 002's
baseline code scored), read beside a `test_time: known` run from the same final models (not metered as traffic,
not counted as compute, as the protocol does not run it; the last round's wall time includes it); under
`test_time: index` it is `acc_test_time`."""
ACC_ASSOCIATION = "acc_association"
"""Share of test clients given the model of a training client holding their distribution (002 Sec. 5)."""
ACC_ASSOCIATION_KNOWN = "acc_association_known"
"""The same, over test clients whose distribution some client trained on (unseen ones cannot match)."""
ACC_SYSTEM = "acc_system"
"""Pooled test sets, one answer per sample: routed (004 eq. 9) or majority vote over personal models."""
ACC_ROUTING = "acc_routing"
"""Share of pooled test samples a router sends to the client they came from (004 Sec. 5)."""
DRIFT_ACC_DROP = "drift_acc_drop"
"""Local accuracy lost to a drift: a drifting client's accuracy at its previous evaluated round less its accuracy at
the round it drifts, mean over the round's drifting clients (`fedbench.runtime.drift_records`; rounds with one)."""
ACC_DRIFTED = "acc_drifted"
"""Mean local accuracy of the clients that drifted this round (rounds with a drift only)."""
ACC_STEADY = "acc_steady"
"""Mean local accuracy of the evaluated clients that did not drift, in a round where some did."""
ACC_OVER_TIME = "acc_over_time"
"""`final.` only: acc_local_mean averaged over the evaluated rounds (FedDrift's headline, AISTATS 2023)."""
RECOVERY_ROUNDS = "recovery_rounds"
"""`final.` only: evaluated rounds until a drifted client is back within the margin of its accuracy before the
drift, mean over the drifts it recovered from (NaN: none recovered)."""
UNRECOVERED = "unrecovered_share"
"""`final.` only: share of the run's drifts not recovered from before the client drifted again or the run ended."""
DRIFT_EVENTS = "drift_events"
"""`final.` only: how many (client, round) drifts the evaluated rounds saw."""
CLIENTS_SAMPLED = "clients_sampled"
TIME_ROUND_S = "time_round_s"
TIME_CLIENT_COMPUTE_S = "time_client_compute_s"
"""Seconds the clients' jobs took (training, evaluation), summed over jobs; worker start-up is not in it."""
TIME_STARTUP_S = "time_startup_s"
"""Seconds before round 1 could start (recorded in round 1 only): the dataset loaded, the scenario built, the
method made, the run's workers started, loaded and warmed up. Mostly one-off costs the first run in a process or
on a worker pool pays (a sweep's first trials paid 3-4 s more wall time than the rest for the dataset alone), which
would otherwise rank runs by who came first; the leaderboard's `wall_s` leaves it out."""
TIME_AGGREGATE_S = "time_aggregate_s"
GPU_PEAK_MB = "gpu_peak_mb"
"""The most GPU memory one client worker's torch held while training the round's clients (MiB reserved by its
caching allocator, the CUDA context not included): what decides how many workers fit on one GPU. GPU runs only."""
COMM_UP_BYTES = "comm_up_bytes"
COMM_DOWN_BYTES = "comm_down_bytes"
COMM_EVAL_DOWN_BYTES = "comm_eval_down_bytes"
COMM_EVAL_UP_BYTES = "comm_eval_up_bytes"
"""Personal models uploaded once after the last round only to be evaluated (system accuracy's vote)."""

FINAL_PREFIX = "final."
TOTAL_PREFIX = "total."
"""A summary's key carries no '/': MLflow's run page makes a chart section of every key prefix before a '/' and
puts them all above the unprefixed per-round curves, so `final/acc_local_mean` opened a run on a wall of single
bars titled like the curves. With a dot they share the curves' section, in key order, under their own titles."""
LEGACY_PREFIXES = {"final/": FINAL_PREFIX, "total/": TOTAL_PREFIX}
"""How stores and task files written before the dot spelled the summaries; `canonical` reads them."""
TIME_RUN_S = "time_run_s"
FAILED_ROUND = "failed_round"
"""The round a FAILED run stopped in (its records cover the rounds before it)."""

#: the test-time clients' metrics (002 Sec. 3.3), reported after the last round only
TEST_TIME = (ACC_TEST_TIME, ACC_TEST_TIME_INDEX, ACC_ASSOCIATION, ACC_ASSOCIATION_KNOWN)
#: per-round keys whose run total is reported as `total.<key>`
SUMMED = (
    TIME_CLIENT_COMPUTE_S,
    TIME_STARTUP_S,
    TIME_AGGREGATE_S,
    TIME_ROUND_S,
    COMM_UP_BYTES,
    COMM_DOWN_BYTES,
    COMM_EVAL_DOWN_BYTES,
    COMM_EVAL_UP_BYTES,
)
#: per-round keys whose last evaluated value is reported as `final.<key>`
LAST = (
    ACC_LOCAL_MEAN,
    ACC_LOCAL_STD,
    ACC_LOCAL_MIN,
    ACC_LOCAL_WEIGHTED,
    ACC_LOCAL_PI_WEIGHTED,
    ACC_LOCAL_MEAN_TRAINED,
    ACC_LOCAL_MEAN_MIXED,
    LOSS_LOCAL_WEIGHTED,
    TRAIN_LOSS_MEAN,
    SCORED_ROUND,
    ACC_TEST_TIME,
    ACC_TEST_TIME_INDEX,
    ACC_ASSOCIATION,
    ACC_ASSOCIATION_KNOWN,
    ACC_SYSTEM,
    ACC_ROUTING,
)


DISPLAY_NAMES = {
    ACC_LOCAL_MEAN: "local test accuracy (mean over clients)",
    ACC_LOCAL_STD: "local test accuracy (std over clients)",
    ACC_LOCAL_MIN: "local test accuracy (worst client)",
    ACC_LOCAL_WEIGHTED: "local test accuracy (sample-weighted)",
    ACC_LOCAL_PI_WEIGHTED: "local test accuracy (pi-weighted)",
    ACC_LOCAL_MEAN_TRAINED: "local test accuracy (mean), each client's trained model",
    ACC_LOCAL_MEAN_MIXED: "local test accuracy (mean), each model mixed with its next partner's",
    TRAIN_LOSS_MEAN: "training loss (mean over clients)",
    LOSS_LOCAL_WEIGHTED: "local test (validation) loss (sample-weighted)",
    ACC_TEST_TIME: "test-time client accuracy",
    ACC_TEST_TIME_INDEX: "test-time client accuracy, same-index association",
    ACC_ASSOCIATION: "test-time association accuracy",
    ACC_SYSTEM: "system accuracy (pooled test sets)",
    ACC_ROUTING: "routing accuracy",
    TIME_CLIENT_COMPUTE_S: "client compute (s)",
    TIME_STARTUP_S: "worker start-up (s)",
    TIME_ROUND_S: "round wall time (s)",
    GPU_PEAK_MB: "peak GPU memory of a worker (MiB)",
    COMM_UP_BYTES: "uplink bytes",
    COMM_DOWN_BYTES: "downlink bytes",
    DRIFT_ACC_DROP: "accuracy drop at a drift",
    ACC_DRIFTED: "local accuracy of the clients that drifted",
    ACC_STEADY: "local accuracy of the clients that did not drift",
    ACC_OVER_TIME: "local test accuracy averaged over rounds",
    RECOVERY_ROUNDS: "rounds to recover from a drift",
    UNRECOVERED: "share of drifts not recovered from",
}
"""How figures and tables name a metric for readers; a metric without an entry shows its key."""


def canonical(key: str) -> str:
    """`key` in today's spelling: a summary written as `final/<key>` (stores and task files from before the dot)
    reads as `final.<key>`, so an old store's runs rank beside new ones and an old `--metric` still works."""
    for old, new in LEGACY_PREFIXES.items():
        if key.startswith(old):
            return new + key.removeprefix(old)
    return key


def is_summary(key: str) -> bool:
    """Whether `key` is a run's summary (logged once at its end), not a per-round metric."""
    return key.startswith((FINAL_PREFIX, TOTAL_PREFIX))


def display_name(key: str) -> str:
    """A readable name for metric `key` (`final.` and `total.` prefixes said in words)."""
    for prefix, words in ((FINAL_PREFIX, "final "), (TOTAL_PREFIX, "total ")):
        if key.startswith(prefix):
            return words + DISPLAY_NAMES.get(key.removeprefix(prefix), key.removeprefix(prefix))
    return DISPLAY_NAMES.get(key, key)


def value_range(key: str) -> tuple[float, float]:
    """The values metric `key` can take: an accuracy (or share) lies in [0, 1]; every other fedbench metric (a
    loss, seconds, bytes, a count) is >= 0. A band of mean ± std drawn past these would show impossible values."""
    bare = key.removeprefix(FINAL_PREFIX).removeprefix(TOTAL_PREFIX)
    if bare == DRIFT_ACC_DROP:  # a difference of accuracies: a client may gain at a drift
        return (-1.0, 1.0)
    return (0.0, 1.0) if bare.startswith(("acc", "unrecovered")) else (0.0, float("inf"))


def better(key: str) -> str:
    """`max` where a larger value of metric `key` is better (an accuracy or share), `min` for the rest (a loss,
    seconds, bytes): the direction a figure marks the best configuration in."""
    bare = key.removeprefix(FINAL_PREFIX).removeprefix(TOTAL_PREFIX)
    return "max" if bare.startswith("acc") else "min"
