"""A cockpit-like process for the kill tests: load a profile, start (or attach to) its run with
the journal open, print the run as one JSON line, then follow it until killed.

usage: python _supervise.py PROFILE.yaml
"""

from __future__ import annotations

import asyncio
import json
import sys

from cockpit.core.profile import load_profile
from cockpit.journal import Journal
from cockpit.supervisor.supervisor import Supervisor


async def main(path: str) -> None:
    profile = load_profile(path)
    journal = Journal.open()
    sup = Supervisor(profile, journal=journal)
    info = await sup.launch(attach=True)
    print(json.dumps({"id": info.id, "pid": info.pid}), flush=True)
    await sup.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
