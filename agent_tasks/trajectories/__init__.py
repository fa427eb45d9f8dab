"""Pure readers and writers of published agent trajectory formats (no Temporal, no Neo4j).

One module per format, each with pydantic models of the format and the mapping of its records
to task events in its docstring (``atif``, ``mini_swe_agent``, ``swe_agent``); ``base`` holds
the rules every format shares and the task naming rule; ``files`` reads a file (one
trajectory, a JSON array, JSON Lines); ``export`` writes a task as ATIF v1.7 and reads such an
export back.
"""

from agent_tasks.trajectories.base import (
    ParsedStep,
    ParsedTrajectory,
    SubagentRef,
    TrajectoryFormatError,
    short_text,
    step_name,
    task_name,
)
from agent_tasks.trajectories.export import (
    ATIF_VERSION,
    EXPORTED_BY,
    check_atif,
    export_atif,
)
from agent_tasks.trajectories.files import FORMATS, detect_format, read_file, read_trajectory
from agent_tasks.trajectories.swe_agent import FAILURE_SIGNALS

__all__ = [
    "ATIF_VERSION",
    "EXPORTED_BY",
    "FAILURE_SIGNALS",
    "FORMATS",
    "ParsedStep",
    "ParsedTrajectory",
    "SubagentRef",
    "TrajectoryFormatError",
    "check_atif",
    "detect_format",
    "export_atif",
    "read_file",
    "read_trajectory",
    "short_text",
    "step_name",
    "task_name",
]
