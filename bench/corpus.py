"""A corpus of distinct trajectory files built from the shipped ones, with altered ids.

Copy ``n`` of a shipped file gets ``-c{n}`` appended to its run's id: the ATIF
``session_id``, the mini-swe-agent ``instance_id``, the SWE-agent problem statement id (set in
``replay_config``; older SWE-agent files have none, so one is added). The id is part of each
run's content, so every copy is a run of its own and a task of its own, with the events,
steps and failures of its original.

    python -m bench.corpus OUT_DIR [--files 1000]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path
from typing import Any

from agent_tasks.cli.planning import EXAMPLES, trajectory_files
from agent_tasks.trajectories import detect_format


def altered(data: dict[str, Any], suffix: str) -> dict[str, Any]:
    """A copy of one trajectory whose run id ends with ``suffix``."""
    data = json.loads(json.dumps(data))
    fmt = detect_format(data)
    if fmt == "atif":
        data["session_id"] = f"{data.get('session_id') or 'run'}{suffix}"
    elif fmt == "mini-swe-agent":
        data["instance_id"] = f"{data.get('instance_id') or 'instance'}{suffix}"
    else:
        replay = data.get("replay_config")
        replay = json.loads(replay) if isinstance(replay, str) else dict(replay or {})
        problem = dict(replay.get("problem_statement") or {})
        problem["id"] = f"{problem.get('id') or 'problem'}{suffix}"
        replay["problem_statement"] = problem
        data["replay_config"] = replay
    return data


def build_corpus(out: Path, files: int, sources: list[Path] | None = None) -> list[Path]:
    """Write ``files`` trajectory files into ``out``, cycling through ``sources`` (default: the
    shipped trajectories); returns their paths."""
    sources = sources or list(trajectory_files([EXAMPLES]))
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for number, source in zip(range(files), itertools.cycle(sources), strict=False):
        data = altered(json.loads(source.read_text(encoding="utf-8")), f"-c{number}")
        path = out / f"c{number:05d}__{source.name}"
        path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--files", type=int, default=1000)
    arguments = parser.parse_args()
    print(len(build_corpus(arguments.out, arguments.files)), "files in", arguments.out)
