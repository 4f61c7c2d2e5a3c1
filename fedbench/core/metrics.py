"""Metric keys, defined once. Per-round keys are logged with step=round; final/total keys once per run."""

TRAIN_LOSS_MEAN = "train_loss_mean"
ACC_LOCAL_MEAN = "acc_local_mean"
ACC_LOCAL_STD = "acc_local_std"
ACC_LOCAL_MIN = "acc_local_min"
ACC_LOCAL_WEIGHTED = "acc_local_weighted"
CLIENTS_SAMPLED = "clients_sampled"
TIME_ROUND_S = "time_round_s"
TIME_CLIENT_COMPUTE_S = "time_client_compute_s"
TIME_AGGREGATE_S = "time_aggregate_s"
COMM_UP_BYTES = "comm_up_bytes"
COMM_DOWN_BYTES = "comm_down_bytes"
COMM_EVAL_DOWN_BYTES = "comm_eval_down_bytes"

FINAL_PREFIX = "final/"
TOTAL_PREFIX = "total/"
TIME_RUN_S = "time_run_s"

#: per-round keys whose run total is reported as `total/<key>`
SUMMED = (TIME_CLIENT_COMPUTE_S, TIME_AGGREGATE_S, TIME_ROUND_S, COMM_UP_BYTES, COMM_DOWN_BYTES, COMM_EVAL_DOWN_BYTES)
#: per-round keys whose last evaluated value is reported as `final/<key>`
LAST = (ACC_LOCAL_MEAN, ACC_LOCAL_STD, ACC_LOCAL_MIN, ACC_LOCAL_WEIGHTED, TRAIN_LOSS_MEAN)
