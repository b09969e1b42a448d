"""Screens: the profile picker, the dashboard, and the modals (crash, quit, confirm, help)."""
