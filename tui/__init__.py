"""The Textual terminal app (timelines, breakdowns, fixes). Views only: analysis lives in trainscope.analyzers."""
