"""Model facts for the memory plan: config.json (cockpit.model.config), the checkpoint's weight bytes
and their split over ranks (weights), the probe that reads them on a GPU host (probe, read), and the
plan's result types shared by every backend's budget (plan). Below the backends: imports nothing of
Cockpit but itself, and never textual, asyncssh or httpx."""
