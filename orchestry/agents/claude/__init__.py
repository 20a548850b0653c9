"""Claude through the Anthropic API: the client, API agents and critics (expert edits, judge)."""
