"""`gpu-governance status` with the start-time forecast (issue 43 item 5): each waiting job's
forecast, `--if-submitted` before submitting, `--history` for run times nobody declared, and
bad input (exit 2, every problem named)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from constructs_lib import cli
from constructs_lib.backends.batch_quota_share.status import _batch_job
from constructs_lib.cli import status as status_command
from constructs_lib.simulator.traces import TraceJob, write_trace
from tests.status.test_status import POLICY, SQUEUE

NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)  # on a tick: the replay's first tick is a minute later
SLURM = ("--pool", "hyperpod-slurm")


class _Frozen(datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setattr(status_command, "datetime", _Frozen)
    squeue = tmp_path / "squeue.txt"
    squeue.write_text(SQUEUE)
    history = tmp_path / "history.csv"  # five past training jobs of an hour each
    write_trace(
        [
            TraceJob(
                job_id=f"past{n}",
                team="training",
                submit_time=n * 100.0,
                duration=3_600.0,
                instance_type="ml.p5.48xlarge",
                count=1,
                priority=90,
                checkpointable=False,
            )
            for n in range(5)
        ],
        history,
    )
    return ("--squeue", str(squeue)), ("--history", str(history))


def run(capsys, *argv):
    code = cli.main(["status", "--example", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_waiting_job_is_told_when_it_starts_or_that_it_cannot_be_known(files, capsys):
    squeue, history = files
    # training's job 16 waits for its team's job 15 (2 nodes, its whole quota; a lender does not
    # borrow), whose start and run time squeue does not give: without history it cannot be known
    code, out, err = run(capsys, "--team", "training", *SLURM, *squeue)
    assert code == 0, err
    assert (
        "    forecast: start unknown: it waits on running jobs (2) whose run time is neither declared nor in the history (--history)"
        in out
    )
    # training's past jobs ran an hour each: a job caught running has a quarter, half or three
    # quarters of an hour left (its start unknown), so job 16 starts at one of those ticks
    code, out, _ = run(capsys, "--team", "training", *SLURM, *squeue, *history)
    assert "    forecast: starts in about 30 min (15 min to 45 min)" in out
    assert "note: forecasts replay the pool through the reclaim planner" in out


def test_the_json_output_carries_each_waiting_jobs_forecast(files, capsys):
    squeue, history = files
    code, out, _ = run(capsys, "--team", "training", *SLURM, *squeue, *history, "--json")
    [status] = json.loads(out)
    jobs = {j["job_id"]: j for j in status["jobs"]}
    assert jobs["15"]["forecast"] is None  # running
    assert jobs["16"]["forecast"] == {
        "earliest_s": 900.0,
        "likely_s": 1_800.0,
        "latest_s": 2_700.0,
        "unknown_run_times": 0,
        "smaller": [],
        "words": "starts in about 30 min (15 min to 45 min)",
    }


def test_if_submitted_forecasts_a_job_before_it_is_submitted(files, capsys):
    squeue, history = files
    asked = ("--if-submitted", "--instance-type", "ml.p5.48xlarge", "--run-time", "2h")
    # one node: it starts beside job 16 (priority 9000, ahead of it) when job 15 ends
    code, out, err = run(capsys, "--team", "training", *SLURM, *squeue, *history, *asked, "--count", "1")
    assert code == 0, err
    assert out.startswith(
        "training in pool hyperpod-slurm: a job of 1 x ml.p5.48xlarge at priority 0, declared run time 7200 s, "
        "submitted now, starts in about 30 min (15 min to 45 min)"
    )
    # two nodes: job 16 takes one of the two job 15 frees, and runs an hour (history): it waits
    # for that too; with one node it would start half an hour sooner
    code, out, _ = run(capsys, "--team", "training", *SLURM, *squeue, *history, *asked, "--count", "2", "--json")
    found = json.loads(out)
    assert found["job"] == {
        "pool": "hyperpod-slurm",
        "instance_type": "ml.p5.48xlarge",
        "count": 2,
        "priority": 0,
        "run_time_s": 7_200.0,
    }
    assert (found["forecast"]["earliest_s"], found["forecast"]["likely_s"], found["forecast"]["latest_s"]) == (
        4_500.0,
        5_400.0,
        6_300.0,
    )
    assert found["forecast"]["words"] == "starts in about 1.5 h (1.2 h to 1.8 h); 30 min with 1 instance"
    # a priority class the team may use is its weight: urgent (90) is still below job 16's 9000
    code, out, _ = run(
        capsys, "--team", "training", *SLURM, *squeue, *history, *asked, "--count", "1", "--priority", "urgent"
    )
    assert "at priority 90," in out and "starts in about 30 min" in out


@pytest.mark.parametrize(
    "argv, messages",
    [
        (
            ("--if-submitted", "--instance-type", "ml.p5.48xlarge", "--count", "1"),
            ["--pool: needed with --if-submitted: the team has a quota in several pools (None) - one of "],
        ),
        (
            (
                *SLURM,
                "--if-submitted",
                "--instance-type",
                "ml.nope",
                "--count",
                "0",
                "--priority",
                "nope",
                "--run-time",
                "0",
            ),
            [
                "--instance-type: not an instance type of pool hyperpod-slurm ('ml.nope') - one of ml.p5.48xlarge",
                "--count: not a number of instances the team may hold here ('0') - a whole number >= 1",
                "--priority: not a priority class of the governance file, nor a number ('nope') - one of urgent, standard, opportunistic, or an integer",
                "--run-time: not a run time ('0') - seconds > 0, or a number with m, h or d (90m, 3h, 2d)",
            ],
        ),
        (
            (*SLURM, "--if-submitted", "--instance-type", "ml.p5.48xlarge", "--count", "3"),
            [
                "--count: more than team training can ever hold of ml.p5.48xlarge in pool hyperpod-slurm ('3') - a whole number 1 to 2"
            ],
        ),
        (
            (*SLURM, "--if-submitted", "--instance-type", "ml.p5.48xlarge", "--count", "1", "--job", "16"),
            ["--job: not with --if-submitted ('16') - one of them"],
        ),
        ((*SLURM, "--count", "2"), ["--count: only with --if-submitted ('2') - --if-submitted --count"]),
        ((*SLURM, "--history", "/nonexistent.csv"), ["/nonexistent.csv: cannot read the trace"]),
    ],
)
def test_bad_input_exits_2_naming_every_problem(files, capsys, argv, messages):
    squeue, _ = files
    code, out, err = run(capsys, "--team", "training", *squeue, *argv)
    assert code == 2 and not out
    for message in messages:
        assert message in err
    assert "Traceback" not in err


def test_if_submitted_on_a_pool_counted_in_gpus_is_refused(files, capsys, tmp_path):
    workloads = tmp_path / "w.json"
    workloads.write_text('{"items": []}')
    code, _, err = run(
        capsys,
        "--team",
        "training",
        "--pool",
        "hyperpod-eks",
        "--workloads",
        str(workloads),
        "--cluster-queues",
        str(workloads),
        "--if-submitted",
        "--instance-type",
        "ml.p5.48xlarge",
        "--count",
        "1",
    )
    assert code == 2 and "--if-submitted: no start forecast here: Kueue counts GPUs per flavor" in err


def test_the_batch_reader_gives_a_running_jobs_start_and_declared_run_time():
    pool = POLICY.pool("sagemaker-training")
    described = {
        "jobId": "j1",
        "jobName": "train",
        "status": "RUNNING",
        "createdAt": 1_800_000_000_000,
        "startedAt": 1_800_000_600_000,
        "timeoutConfig": {"attemptDurationSeconds": 7_200},
        "serviceRequestPayload": json.dumps(
            {
                "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 2},
                "StoppingCondition": {"MaxRuntimeInSeconds": 3_600},
            }
        ),
    }
    job = _batch_job(described, pool, "research", set())
    assert (job.started_at, job.run_time_s, job.count) == (1_800_000_600.0, 3_600.0, 2)  # the shorter limit
    waiting = _batch_job({**described, "status": "RUNNABLE"}, pool, "research", set())
    assert waiting.started_at is None  # a waiting job that ran before: its old start is not this run's
