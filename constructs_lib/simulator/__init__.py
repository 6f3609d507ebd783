"""The simulator: replays of job traces through the reclaim planner (engine), trace readers and
converters (traces, importers), what a replay prints (report) and its commands (cli)."""

from .engine import RunMetrics, TeamStats, check_trace_fits_pool, compare, pooled_share, simulate, static_shares
from .traces import TRACE_COLUMNS, OpenbMapping, TraceJob, convert_openb, read_trace, write_trace

__all__ = [
    "RunMetrics",
    "TeamStats",
    "check_trace_fits_pool",
    "compare",
    "pooled_share",
    "simulate",
    "static_shares",
    "TRACE_COLUMNS",
    "OpenbMapping",
    "TraceJob",
    "convert_openb",
    "read_trace",
    "write_trace",
]
