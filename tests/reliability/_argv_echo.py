"""A harmless stand-in server: prints its argv, its working directory and the environment
variables named in COCKPIT_ECHO_ENV as one JSON line (the profile-fuzz tests compare them)."""

import json
import os
import sys

names = [n for n in os.environ.get("COCKPIT_ECHO_ENV", "").split(",") if n]
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": {n: os.environ.get(n) for n in names}}))
