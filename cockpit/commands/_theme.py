"""The theme `cockpit tui` and `cockpit demo` open the TUI in (the themes are the TUI's own)."""

from __future__ import annotations

from cockpit.ui.themes import DEFAULT_THEME, configured_theme, validate_theme_name


def resolve_theme(requested: str | None) -> str:
    """--theme wins, then `theme:` in the config file, then dark."""
    return validate_theme_name(requested) or configured_theme() or DEFAULT_THEME

