"""Provenance shared by the profiles this package writes (no torch here)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


def git_revision() -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        if rev:
            return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    # A copy of the tree without .git (e.g. shipped to a GPU machine): the caller may say which.
    return os.environ.get("LLMPLAN_GIT_REVISION", "unknown")
