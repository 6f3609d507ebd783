"""Array jobs on the Batch model (:class:`ArrayBatch`, a :class:`tests.aws_model.batch.FakeBatch`),
played by the rules of the register (docs/aws-behaviour.md):

- a job submitted with ``arrayProperties.size`` N is a parent of N children ``<id>:0`` ..
  ``<id>:N-1``, each a job of its own with ``arrayProperties.index``; the parent never becomes
  RUNNABLE or RUNNING: it is PENDING while its children wait or run, SUCCEEDED once all of them
  succeeded, FAILED once all ended and one failed [aws: batch.array-jobs];
- terminating the parent terminates its children; terminating one child leaves its siblings
  running, and the parent fails once they end [aws: batch.array-jobs];
- ``ListJobs`` with ``arrayJobId`` lists a parent's children by status [aws: batch.array-jobs];
  whether ``ListJobs`` by queue lists them is undocumented, so the model takes either reading
  (``children_listed_by_queue``) [aws: batch.array-children-listing];
- a job that depends on the parent waits for the whole array, and fails with it
  [aws: batch.job-dependencies].

Kept beside ``batch.py`` rather than in it so the two change apart; it touches only what arrays
change. Whether DescribeJobs gives a child its parent's share identifier and tags is not
documented: here a child has the share and no tags (the reclaim adapter gives a child what it
lacks of its parent's) [aws: batch.array-child-fields].
"""

from __future__ import annotations

from typing import Any

from .batch import ACTIVE, FakeBatch, Faults

CHILD_SEPARATOR = ":"


class ArrayBatch(FakeBatch):
    def __init__(self, *args: Any, children_listed_by_queue: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.children_listed_by_queue = children_listed_by_queue
        self.children: dict[str, list[str]] = {}  # parent id -> its children's ids, by index

    def submit_job(self, **request: Any) -> dict[str, Any]:
        # an array's children <id>:<index>, each a job; the parent runs none of the work [aws: batch.array-jobs]
        answer = super().submit_job(**request)
        size = request.get("arrayProperties", {}).get("size")
        if size:
            parent = self.jobs[answer["jobId"]]
            parent["arrayProperties"] = {"size": size}
            single = {k: v for k, v in request.items() if k not in ("arrayProperties", "tags")}
            for index in range(size):
                child_id = f"{parent['jobId']}{CHILD_SEPARATOR}{index}"
                child = self._new_job(child_id, single)
                child.pop("tags")
                child.update(
                    jobArn=f"{parent['jobArn']}{CHILD_SEPARATOR}{index}",
                    arrayProperties={"index": index},
                    createdAt=parent["createdAt"],
                )
                self.jobs[child_id] = self.active[child_id] = child
                self.work[child_id] = self.work[parent["jobId"]]
                self.children.setdefault(parent["jobId"], []).append(child_id)
            self.work[parent["jobId"]] = float("inf")  # a parent does no work of its own
            self._settle_dependencies()
        return answer

    def list_jobs(
        self, *, jobQueue: str | None = None, arrayJobId: str | None = None, jobStatus: str | None = None, **rest: Any
    ) -> dict[str, Any]:
        if (
            arrayJobId is None
        ):  # by queue: children listed or not, as the model is told [aws: batch.array-children-listing]
            listed = super().list_jobs(jobQueue=jobQueue, jobStatus=jobStatus, **rest)
            if not self.children_listed_by_queue:
                listed["jobSummaryList"] = [s for s in listed["jobSummaryList"] if not self._is_child(s["jobId"])]
            return listed
        self._call("ListJobs", {"arrayJobId": arrayJobId, "jobStatus": jobStatus})  # [aws: batch.array-jobs]
        status = jobStatus or "RUNNING"
        summaries = [
            {"jobId": child, "jobArn": self.jobs[child]["jobArn"], "jobName": self.jobs[child]["jobName"]}
            for child in self.children.get(arrayJobId, [])
            if self.jobs[child]["status"] == status
        ]
        return self._answer("ListJobs", {"jobSummaryList": summaries})

    def terminate_job(self, *, jobId: str, reason: str) -> dict[str, Any]:
        # a child alone, or the parent with all its children [aws: batch.array-jobs]
        if jobId not in self.children:
            return super().terminate_job(jobId=jobId, reason=reason)
        self._call("TerminateJob", {"jobId": jobId, "reason": reason})
        # the children go with their parent, in this one call: no faults or requests of their own
        saved, self.faults, calls = self.faults, Faults(), len(self.requests)
        try:
            for child in self.children[jobId]:
                if self.jobs[child]["status"] in ACTIVE:
                    super().terminate_job(jobId=child, reason=reason)
        finally:
            self.faults = saved
            del self.requests[calls:]
        return self._answer("TerminateJob", {})

    def _settle_dependencies(self) -> None:
        # the parent's status follows its children's [aws: batch.array-jobs]; its dependants follow it
        # [aws: batch.job-dependencies]
        super()._settle_dependencies()
        for parent_id, children in self.children.items():
            parent = self.jobs[parent_id]
            if parent["status"] in ("SUCCEEDED", "FAILED"):
                continue
            states = [self.jobs[c]["status"] for c in children]
            if any(s not in ("SUCCEEDED", "FAILED") for s in states):
                parent["status"] = "PENDING"
            else:
                ended = "FAILED" if "FAILED" in states else "SUCCEEDED"
                self._end(parent, ended, "Array Child Job failed" if ended == "FAILED" else "")
                super()._settle_dependencies()  # its dependants move on

    def _is_child(self, job_id: str) -> bool:
        return "index" in self.jobs[job_id].get("arrayProperties", {})
