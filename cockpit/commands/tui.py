"""`cockpit` / `cockpit tui [PROFILE]`: the profile picker, or straight to a profile's dashboard
(attaching when a run of it is live)."""

from __future__ import annotations

import argparse
from pathlib import Path

from cockpit.commands._support import missing_profile
from cockpit.commands._theme import resolve_theme
from cockpit.face import PD_ROLES, BadInput, load_profile, resolve_profile
from cockpit.ui.app import CockpitApp


def run(args: argparse.Namespace) -> int:
    theme = resolve_theme(getattr(args, "theme", None))
    profile = None
    group: str | None = None
    extra: list[Path] = []
    if getattr(args, "profile", None):
        path = resolve_profile(args.profile)
        if not path.exists() and "/" not in args.profile and not args.profile.endswith((".yaml", ".yml")):

            base, _, role = args.profile.rpartition(".")
            if role not in PD_ROLES or not base or not resolve_profile(base).exists():
                raise missing_profile(args.profile)
            path, group = resolve_profile(base), role  # NAME.prefill / NAME.decode: that group's dashboard
        profile = load_profile(path)  # ProfileError → one line, exit 2 (cockpit/errors.py)
        if group is not None and not profile.groups:
            raise BadInput(f"{profile.name} declares no prefill/decode groups, so there is no {args.profile!r}")
        extra.append(path)


    app = CockpitApp(profile=profile, theme=theme, extra_profiles=extra, start_group=group)
    app.run()
    return int(app.return_code or 0)
