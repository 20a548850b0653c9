"""The joint turn: the team answers a task (between the algorithms and evaluation above, the agents and environments below)."""
