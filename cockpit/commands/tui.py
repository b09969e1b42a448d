"""`cockpit` / `cockpit tui [PROFILE]`: the profile picker, or straight to a profile's dashboard
(attaching when a run of it is live)."""

from __future__ import annotations

import argparse
from pathlib import Path


def resolve_theme(requested: str | None) -> str:
    """--theme wins, then `theme:` in the config file, then dark."""
    from cockpit.ui.themes import DEFAULT_THEME, configured_theme, validate_theme_name

    return validate_theme_name(requested) or configured_theme() or DEFAULT_THEME


def run(args: argparse.Namespace) -> int:
    from cockpit.face import load_profile, resolve_profile

    theme = resolve_theme(getattr(args, "theme", None))
    profile = None
    extra: list[Path] = []
    if getattr(args, "profile", None):
        path = resolve_profile(args.profile)
        if not path.exists() and "/" not in args.profile and not args.profile.endswith((".yaml", ".yml")):
            from cockpit.commands._support import missing_profile

            raise missing_profile(args.profile)
        profile = load_profile(path)  # ProfileError → one line, exit 2 (cockpit/errors.py)
        extra.append(path)

    from cockpit.ui.app import CockpitApp

    app = CockpitApp(profile=profile, theme=theme, extra_profiles=extra)
    app.run()
    return int(app.return_code or 0)
