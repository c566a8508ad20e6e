"""TonY configuration: layered Hadoop-XML files, validated into a JobSpec."""

from tony_py.config.layers import TonyConf, load_conf
from tony_py.config.build import build_job_spec
from tony_py.config.fit import check_fits
from tony_py.config.spec import JobSpec, Resources, TaskId, TaskType

__all__ = [
    "JobSpec",
    "Resources",
    "TaskId",
    "TaskType",
    "TonyConf",
    "build_job_spec",
    "check_fits",
    "load_conf",
]
