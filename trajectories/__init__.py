"""Pure readers and writers of published agent trajectory formats (no Temporal, no Neo4j)."""

from trajectories.core import (
    ATIF_VERSION,
    EXPORTED_BY,
    FAILURE_SIGNALS,
    FORMATS,
    ParsedStep,
    ParsedTrajectory,
    TrajectoryFormatError,
    detect_format,
    export_atif,
    parse_file,
)

__all__ = [
    "ATIF_VERSION",
    "EXPORTED_BY",
    "FAILURE_SIGNALS",
    "FORMATS",
    "ParsedStep",
    "ParsedTrajectory",
    "TrajectoryFormatError",
    "detect_format",
    "export_atif",
    "parse_file",
]
