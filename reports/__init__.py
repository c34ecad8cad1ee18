"""Renderings of an analysis: terminal summary, JSON, Markdown."""
