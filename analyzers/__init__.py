"""Pure functions from the normalized trace model to breakdowns, findings and verdicts."""
