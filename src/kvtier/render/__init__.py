"""Rendering the note and the lab from Jinja2 templates and the numbers registry."""
