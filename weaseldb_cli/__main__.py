"""`python -m weaseldb_cli ...` is the `weaseldb` command (`weaseldb up` starts services so)."""

import sys

from weaseldb_cli.main import main

sys.exit(main())
