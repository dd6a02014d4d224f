"""Print the dependencies pyproject.toml declares (and those of the extras named after
it), one per line, for a Dockerfile layer that installs them before the source arrives.

    python requirements-of.py pyproject.toml [EXTRA...]
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
requirements = list(project.get("dependencies", []))
for extra in sys.argv[2:]:
    requirements += project.get("optional-dependencies", {})[extra]
print("\n".join(requirements))
